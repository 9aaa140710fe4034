// pallet-controlplane runs a real Kubernetes control plane for pallet's tests:
// an embedded etcd, kube-apiserver and kube-controller-manager, all in this one
// process, built from the official Kubernetes modules. No scheduler; a fake
// kubelet (kubelet.go) runs pods only in namespaces labelled pallet.dev/fake-kubelet=on.
//
// The apiserver and controller manager are driven through their Options/Run
// APIs rather than their cobra commands, because each command installs its
// own signal handler (allowed once per process) and each applies the shared
// component-globals registry and logging config, which may only happen once.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "pallet-controlplane failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	// `pallet-controlplane user ...` mints a client kubeconfig from the CA and exits.
	if len(os.Args) > 1 && os.Args[1] == "user" {
		return mintUser(os.Args[2:])
	}
	defPort, _ := strconv.Atoi(envOr("PALLET_CONTROLPLANE_PORT", "16443"))
	port := flag.Int("port", defPort, "apiserver TLS port on 127.0.0.1 (env PALLET_CONTROLPLANE_PORT)")
	stateDir := flag.String("state-dir", envOr("PALLET_CONTROLPLANE_DIR", ".pallet/controlplane"), "directory for etcd data, pki and kubeconfig")
	verbosity := flag.Int("v", 0, "klog verbosity for apiserver and controller manager")
	flag.Parse()

	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if addr := os.Getenv("PALLET_CONTROLPLANE_PROFILE"); addr != "" {
		if err := serveProfiler(addr); err != nil {
			return fmt.Errorf("profiler: %w", err)
		}
	}
	readyFile := filepath.Join(dir, "ready")
	os.Remove(readyFile)

	p := newPKI(filepath.Join(dir, "pki"))
	if err := p.ensure(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", *port)
	adminKubeconfig := filepath.Join(dir, "kubeconfig")
	kcmKubeconfig := filepath.Join(dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmKubeconfig, server, p.caCert, p.kcmCert, p.kcmKey, "system:kube-controller-manager"); err != nil {
		return err
	}

	// First signal starts a graceful shutdown; a second one exits at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	kcmCtx, stopKCM := context.WithCancel(apiCtx)
	defer stopKCM()
	shutdown := make(chan struct{})
	go func() {
		<-sigs
		klog.InfoS("shutting down")
		close(shutdown)
		<-sigs
		klog.InfoS("second signal, exiting now")
		klog.Flush()
		os.Exit(1)
	}()

	start := time.Now()
	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	// Close panics when called twice; error paths return early via the defer.
	var closeEtcd sync.Once
	defer closeEtcd.Do(etcd.Close)
	klog.InfoS("etcd ready", "url", etcdURL, "elapsed", time.Since(start))

	apiOpts := apiserveroptions.NewServerRunOptions()
	apiFS := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, fs := range apiOpts.Flags().FlagSets {
		apiFS.AddFlagSet(fs)
	}
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(*port),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + server,
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		// A /16: test runs leave their namespaces (and Services) behind, and a /24's 254
		// addresses ran out after many runs on one control plane ("range is full").
		"--service-cluster-ip-range=10.0.0.0/16",
		"--requestheader-client-ca-file=" + p.frontProxyCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.proxyClientCert,
		"--proxy-client-key-file=" + p.proxyClient,
		// Endpoints may not hold loopback addresses, so the default/kubernetes
		// Service gets none; nothing in the tests runs in pods that would use it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=" + strconv.Itoa(*verbosity),
	}
	apiArgs = append(apiArgs, auditArgs(dir)...)
	if err := apiFS.Parse(apiArgs); err != nil {
		return fmt.Errorf("apiserver flags: %w", err)
	}

	kcmOpts, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	kcmNamed := kcmOpts.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	kcmOpts.ParsedFlags = &kcmNamed
	kcmFS := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, fs := range kcmNamed.FlagSets {
		kcmFS.AddFlagSet(fs)
	}
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--leader-elect=false",
		// No serving endpoint: nothing scrapes it and it would need a port.
		"--secure-port=0",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--cluster-signing-cert-file=" + p.caCert,
		"--cluster-signing-key-file=" + p.caKey,
		// client-go's default of 20 requests per second per controller (each controller has
		// its own client with --use-service-account-credentials) and 5 deployment/replicaset
		// workers made about 5 Deployments Available per second: the benchmarks measured these
		// limits instead of the clients under test. A test cluster on loopback can take more.
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--concurrent-deployment-syncs=50",
		"--concurrent-replicaset-syncs=50",
		"--concurrent-namespace-syncs=50",
		"--concurrent-gc-syncs=50",
		"--concurrent-service-endpoint-syncs=20",
		"--concurrent-endpoint-syncs=20",
		"--concurrent-serviceaccount-token-syncs=20",
		"--concurrent-job-syncs=20",
	}
	if err := kcmFS.Parse(kcmArgs); err != nil {
		return fmt.Errorf("controller-manager flags: %w", err)
	}

	// Both components share the process-wide registry of versions and feature
	// gates; it is applied once, after both flag sets are parsed.
	registry := compatibility.DefaultComponentGlobalsRegistry
	if err := registry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(apiOpts.Logs, registry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	cliflag.PrintFlags(apiFS)

	completed, err := apiOpts.Complete(apiCtx)
	if err != nil {
		return fmt.Errorf("apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("apiserver options: %v", errs)
	}
	apiDone := make(chan error, 1)
	go func() { apiDone <- apiserverapp.Run(apiCtx, completed) }()

	if err := waitReady(server, p, apiDone, shutdown); err != nil {
		return err
	}
	klog.InfoS("apiserver ready", "elapsed", time.Since(start))
	if err := writeKubeconfig(adminKubeconfig, server, p.caCert, p.adminCert, p.adminKey, "pallet-admin"); err != nil {
		return err
	}
	if err := bindAuditedGroup(apiCtx, adminKubeconfig); err != nil {
		return fmt.Errorf("audited group binding: %w", err)
	}

	kcmConfig, err := kcmOpts.Config(kcmCtx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return fmt.Errorf("controller-manager config: %w", err)
	}
	kcmDone := make(chan error, 1)
	go func() { kcmDone <- kcmapp.Run(kcmCtx, kcmConfig.Complete()) }()
	// Stopped with the controllers; it only acts on namespaces that opt in.
	go func() {
		if err := runFakeKubelet(kcmCtx, adminKubeconfig); err != nil {
			klog.ErrorS(err, "fake kubelet stopped")
		}
	}()

	// Ready means usable by tests: the serviceaccount controller has created
	// the default ServiceAccount, which proves the controller manager runs.
	if err := waitDefaultSA(adminKubeconfig, apiDone, kcmDone, shutdown); err != nil {
		return err
	}
	if err := writeAtomic(readyFile, []byte(server+"\n"), 0o644); err != nil {
		return err
	}
	klog.InfoS("control plane ready", "server", server, "kubeconfig", adminKubeconfig, "elapsed", time.Since(start))

	var runErr error
	select {
	case <-shutdown:
	case runErr = <-apiDone:
		runErr = fmt.Errorf("apiserver exited: %v", runErr)
		apiDone <- nil
	case runErr = <-kcmDone:
		runErr = fmt.Errorf("controller-manager exited: %v", runErr)
		kcmDone <- nil
	case runErr = <-etcd.Err():
		runErr = fmt.Errorf("etcd: %v", runErr)
	}
	os.Remove(readyFile)

	// Controllers first so they do not spin on a vanishing apiserver.
	stopKCM()
	select {
	case <-kcmDone:
	// Short waits: this cluster holds test data only, and CI pays for every second of a stop.
	case <-time.After(5 * time.Second):
		klog.InfoS("controller-manager did not stop in time")
	}
	stopAPI()
	select {
	case <-apiDone:
	case <-time.After(10 * time.Second):
		klog.InfoS("apiserver did not stop in time")
	}
	closeEtcd.Do(etcd.Close)
	klog.InfoS("stopped")
	return runErr
}

// freePorts returns n distinct free ports below the kernel's ephemeral range. etcd binds them after
// they are chosen; a port from the ephemeral range could be taken in between by any outgoing
// connection on the machine, a port below it only by another server.
func freePorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				low = v
			}
		}
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free port below %d after 1000 tries", low)
		}
		port := 10000 + rng.Intn(low-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

func startEtcd(dir string) (*embed.Etcd, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	cport, pport := ports[0], ports[1]
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cport)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pport)}
	cfg := embed.NewConfig()
	cfg.Name = "pallet"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	// The member's peer URL is recorded in the data dir on first start; a
	// restart with a new peer port must not try to re-bootstrap the cluster.
	cfg.InitialCluster = "pallet=" + pu.String()
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	// NewConfig leaves this at 0 (only the CLI flag has a default), which logs
	// a warning for every single request.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	// Test data only: fewer entries kept in memory between snapshots, and no
	// fsync (losing data on a machine crash is fine here). The quota counts the
	// whole file, which never shrinks without a defrag: 256 MiB was exceeded by
	// the scale benchmark's 1,000 apps after its 100 and 500 (etcd then refuses
	// every write); 4 GiB is a bound, not an allocation.
	cfg.QuotaBackendBytes = 4 << 30
	cfg.SnapshotCount = 5000
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("etcd not ready after 60s")
	}
	return e, cu.String(), nil
}

// waitReady polls /readyz with the admin client certificate.
func waitReady(server string, p *pki, apiDone <-chan error, shutdown <-chan struct{}) error {
	caPEM, err := os.ReadFile(p.caCert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(p.adminCert, p.adminKey)
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}
	deadline := time.Now().Add(120 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		resp, err := client.Get(server + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case err := <-apiDone:
			return fmt.Errorf("apiserver exited before ready: %v", err)
		case <-shutdown:
			return errors.New("shutdown requested before ready")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("apiserver not ready after 120s, last: %s", last)
}

func waitDefaultSA(kubeconfig string, apiDone, kcmDone <-chan error, shutdown <-chan struct{}) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(120 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, last = cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		cancel()
		if last == nil {
			return nil
		}
		select {
		case err := <-apiDone:
			return fmt.Errorf("apiserver exited: %v", err)
		case err := <-kcmDone:
			return fmt.Errorf("controller-manager exited: %v", err)
		case <-shutdown:
			return errors.New("shutdown requested before ready")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("default ServiceAccount not created after 120s: %v", last)
}
