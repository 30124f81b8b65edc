// The Inference Extension's body-based router (BBR) with the prompt-length classifier registered next to the
// upstream plugins: it runs in front of the endpoint picker and names each request's objective.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/gateway-api-inference-extension/cmd/bbr/runner"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/bbr/framework"

	"ascend-fleet.dev/epp/classify"
)

func main() {
	framework.Register(classify.PluginType, classify.Factory)
	if err := runner.NewRunner().WithExecutableName("classifier").Run(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
