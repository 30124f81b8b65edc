package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

// newPKICommand writes what a loopback control plane needs to run with TLS and RBAC: a CA, the API server's
// serving certificate (127.0.0.1, localhost and the in-cluster names), client certificates for the admin and
// the two controllers, and the service-account signing key. Existing files are kept, so a restart reuses them.
func newPKICommand() *cobra.Command {
	var dir string
	command := &cobra.Command{
		Use:          "pki",
		Short:        "generate the control plane's certificates and keys into --dir",
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil {
				return nil
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			ca, caKey, err := writeCA(dir)
			if err != nil {
				return err
			}
			serving := &x509.Certificate{
				Subject:     pkix.Name{CommonName: "kube-apiserver"},
				DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
				IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			if err := writeLeaf(dir, "apiserver", serving, ca, caKey); err != nil {
				return err
			}
			clients := map[string]pkix.Name{
				"admin":                   {CommonName: "ascend-fleet-admin", Organization: []string{"system:masters"}},
				"kube-controller-manager": {CommonName: "system:kube-controller-manager"},
				"kube-scheduler":          {CommonName: "system:kube-scheduler"},
			}
			for name, subject := range clients {
				leaf := &x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
				if err := writeLeaf(dir, name, leaf, ca, caKey); err != nil {
					return err
				}
			}
			key, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				return err
			}
			return writePEM(filepath.Join(dir, "service-account.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
		},
	}
	command.Flags().StringVar(&dir, "dir", "pki", "directory for the certificates and keys")
	return command
}

func writeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ascend-fleet-dev-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, writePEM(filepath.Join(dir, "ca.key"), "EC PRIVATE KEY", keyDER)
}

func writeLeaf(dir, name string, template, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().AddDate(10, 0, 0)
	template.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", name, err)
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", keyDER)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
