package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of every key and certificate the control plane uses.
// Files are generated once per state dir and reused on restart, so clients
// holding the kubeconfig keep working across stop/start.
type pki struct {
	dir                          string
	caCert, caKey                string
	servingCert, servingKey      string
	adminCert, adminKey          string
	kcmCert, kcmKey              string
	saKey, saPub                 string
	frontProxyCA, frontProxyKey  string
	proxyClientCert, proxyClient string
}

func newPKI(dir string) *pki {
	p := func(n string) string { return filepath.Join(dir, n) }
	return &pki{
		dir:    dir,
		caCert: p("ca.crt"), caKey: p("ca.key"),
		servingCert: p("apiserver.crt"), servingKey: p("apiserver.key"),
		adminCert: p("admin.crt"), adminKey: p("admin.key"),
		kcmCert: p("controller-manager.crt"), kcmKey: p("controller-manager.key"),
		saKey: p("sa.key"), saPub: p("sa.pub"),
		frontProxyCA: p("front-proxy-ca.crt"), frontProxyKey: p("front-proxy-ca.key"),
		proxyClientCert: p("front-proxy-client.crt"), proxyClient: p("front-proxy-client.key"),
	}
}

// ensure creates any missing material. The CA is created first; if it is
// missing everything signed by it is regenerated too.
func (p *pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	if !exists(p.caCert) || !exists(p.caKey) || !exists(p.servingCert) {
		// A fresh CA invalidates every leaf, so start over.
		entries, _ := os.ReadDir(p.dir)
		for _, e := range entries {
			os.Remove(filepath.Join(p.dir, e.Name()))
		}
	} else {
		return nil
	}
	ca, caKey, err := newCA("pallet-controlplane-ca", p.caCert, p.caKey)
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := newLeaf(ca, caKey, pkix.Name{CommonName: "kube-apiserver"}, ips, dns, x509.ExtKeyUsageServerAuth, p.servingCert, p.servingKey); err != nil {
		return err
	}
	if err := newLeaf(ca, caKey, pkix.Name{CommonName: "pallet-admin", Organization: []string{"system:masters"}}, nil, nil, x509.ExtKeyUsageClientAuth, p.adminCert, p.adminKey); err != nil {
		return err
	}
	// The bootstrap RBAC policy already binds this user name to the
	// controller manager's role, so it does not need system:masters.
	if err := newLeaf(ca, caKey, pkix.Name{CommonName: "system:kube-controller-manager"}, nil, nil, x509.ExtKeyUsageClientAuth, p.kcmCert, p.kcmKey); err != nil {
		return err
	}
	// Separate CA for the aggregation layer's front proxy, as upstream recommends.
	fca, fcaKey, err := newCA("pallet-front-proxy-ca", p.frontProxyCA, p.frontProxyKey)
	if err != nil {
		return err
	}
	if err := newLeaf(fca, fcaKey, pkix.Name{CommonName: "front-proxy-client"}, nil, nil, x509.ExtKeyUsageClientAuth, p.proxyClientCert, p.proxyClient); err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(p.saKey, saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(p.saPub, "PUBLIC KEY", pub, 0o644)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func newCA(cn, certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	return cert, key, writeKey(keyPath, key)
}

func newLeaf(ca *x509.Certificate, caKey crypto.Signer, subject pkix.Name, ips []net.IP, dns []string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeAtomic renames into place so a reader never sees a half-written file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeKubeconfig writes a kubeconfig with the client certificate embedded,
// so the file stays valid if the state dir is copied or the pki is read-only.
func writeKubeconfig(path, server, caPath, certPath, keyPath, user string) error {
	read := func(p string) (string, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		if len(b) == 0 {
			return "", errors.New(p + " is empty")
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	ca, err := read(caPath)
	if err != nil {
		return err
	}
	cert, err := read(certPath)
	if err != nil {
		return err
	}
	key, err := read(keyPath)
	if err != nil {
		return err
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: pallet
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: pallet
  context:
    cluster: pallet
    user: %s
current-context: pallet
`, server, ca, user, cert, key, user)
	return writeAtomic(path, []byte(doc), 0o600)
}
