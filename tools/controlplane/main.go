// Command controlplane is the real Kubernetes control plane in one binary, built from the release's own
// Go modules: `controlplane pki|etcd|kube-apiserver|kube-controller-manager|kube-scheduler [flags]`.
// Each component runs in its own process, started by the Python launcher (ascend_fleet.realcluster).
package main

import (
	"fmt"
	"os"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	components := map[string]func() *cobra.Command{
		"etcd":                    newEtcdCommand,
		"pki":                     newPKICommand,
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	}
	if len(os.Args) < 2 || components[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: controlplane pki|etcd|kube-apiserver|kube-controller-manager|kube-scheduler [flags]")
		os.Exit(2)
	}
	command := components[os.Args[1]]()
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}
