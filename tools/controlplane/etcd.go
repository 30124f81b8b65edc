package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"
)

// newEtcdCommand runs one etcd member inside this process (the server kube-apiserver v1.34 is tested with),
// listening on loopback only, without TLS: nothing but the local kube-apiserver talks to it.
func newEtcdCommand() *cobra.Command {
	var dataDir, clientURL, peerURL string
	command := &cobra.Command{
		Use:          "etcd",
		Short:        "run an embedded single-member etcd",
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			config := embed.NewConfig()
			config.Dir = dataDir
			config.LogLevel = "warn"
			client, err := url.Parse(clientURL)
			if err != nil {
				return fmt.Errorf("--listen-client-url: %w", err)
			}
			peer, err := url.Parse(peerURL)
			if err != nil {
				return fmt.Errorf("--listen-peer-url: %w", err)
			}
			config.ListenClientUrls = []url.URL{*client}
			config.AdvertiseClientUrls = []url.URL{*client}
			config.ListenPeerUrls = []url.URL{*peer}
			config.AdvertisePeerUrls = []url.URL{*peer}
			config.InitialCluster = config.Name + "=" + peer.String()
			// A test cluster's history is short-lived: compact hourly, keep the database small.
			config.AutoCompactionMode = "periodic"
			config.AutoCompactionRetention = "1h"
			config.QuotaBackendBytes = 2 << 30
			server, err := embed.StartEtcd(config)
			if err != nil {
				return err
			}
			defer server.Close()
			select {
			case <-server.Server.ReadyNotify():
				fmt.Fprintln(os.Stderr, "etcd ready on", client.String())
			case <-time.After(60 * time.Second):
				return fmt.Errorf("etcd did not become ready in 60s")
			}
			signals := make(chan os.Signal, 1)
			signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
			select {
			case err := <-server.Err():
				return err
			case <-signals:
				return nil
			}
		},
	}
	command.Flags().StringVar(&dataDir, "data-dir", "etcd-data", "directory for etcd's data")
	command.Flags().StringVar(&clientURL, "listen-client-url", "http://127.0.0.1:2379", "client URL (loopback)")
	command.Flags().StringVar(&peerURL, "listen-peer-url", "http://127.0.0.1:2380", "peer URL (loopback)")
	return command
}
