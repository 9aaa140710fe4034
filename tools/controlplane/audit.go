package main

// Counting a client's API requests: the API server writes an audit log of the requests of users
// in one group (auditedGroup) and of nobody else, so tests and the other clients pay nothing for
// it, while a benchmark runs the client under test with a certificate in that group (minted by
// `pallet-controlplane user`) and counts its requests by verb and resource from the log.

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// auditedGroup is the group (a client certificate's O) whose requests are audited; it is bound
// to cluster-admin.
const auditedGroup = "pallet:audited"

// Metadata level (verb, resource, user, code, timestamps: no bodies) and no RequestReceived
// stage, so each request is one line; everyone else's requests are not logged at all.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["` + auditedGroup + `"]
- level: None
`

// auditArgs writes the policy to dir and returns the apiserver's audit flags: a JSON log at
// dir/audit/audit.log, rotated at 100 MB with 3 old files kept (at most 400 MB on disk).
func auditArgs(dir string) []string {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := writeAtomic(policy, []byte(auditPolicy), 0o644); err != nil {
		// Without the policy the control plane still serves; only the counting is lost.
		fmt.Fprintf(os.Stderr, "audit policy not written, audit log off: %v\n", err)
		return nil
	}
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + filepath.Join(dir, "audit", "audit.log"),
		"--audit-log-format=json",
		"--audit-log-maxsize=100",
		"--audit-log-maxbackup=3",
		"--audit-log-maxage=1",
	}
}

// bindAuditedGroup makes the audited group cluster-admin (idempotent).
func bindAuditedGroup(ctx context.Context, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pallet-audited-cluster-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: auditedGroup}},
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// mintUser writes a kubeconfig for a client certificate signed by the control plane's CA:
//
//	pallet-controlplane user --state-dir DIR --name NAME [--group G]... --out FILE
//
// The group defaults to the audited one. The control plane must have started once in DIR (its
// CA and its ready file, which names the server, are read).
func mintUser(args []string) error {
	fs := flag.NewFlagSet("user", flag.ContinueOnError)
	stateDir := fs.String("state-dir", envOr("PALLET_CONTROLPLANE_DIR", ".pallet/controlplane"), "the control plane's state directory")
	name := fs.String("name", "", "user name (the certificate's CN)")
	out := fs.String("out", "", "kubeconfig to write")
	var groups multiFlag
	fs.Var(&groups, "group", "group (the certificate's O), repeatable; default "+auditedGroup)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *out == "" {
		return errors.New("user: --name and --out are required")
	}
	if len(groups) == 0 {
		groups = multiFlag{auditedGroup}
	}
	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	ready, err := os.ReadFile(filepath.Join(dir, "ready"))
	if err != nil {
		return fmt.Errorf("user: the control plane in %s is not running (no ready file): %w", dir, err)
	}
	server := strings.TrimSpace(string(ready))
	p := newPKI(filepath.Join(dir, "pki"))
	ca, caKey, err := loadCA(p.caCert, p.caKey)
	if err != nil {
		return fmt.Errorf("user: %w", err)
	}
	usersDir := filepath.Join(dir, "users")
	if err := os.MkdirAll(usersDir, 0o700); err != nil {
		return err
	}
	cert, key := filepath.Join(usersDir, *name+".crt"), filepath.Join(usersDir, *name+".key")
	if err := newLeaf(ca, caKey, pkix.Name{CommonName: *name, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth, cert, key); err != nil {
		return err
	}
	return writeKubeconfig(*out, server, p.caCert, cert, key, *name)
}

func loadCA(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, nil, fmt.Errorf("no PEM in %s", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil {
		return nil, nil, fmt.Errorf("no PEM in %s", keyPath)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
