// The endpoint picker (EPP) of the Gateway API Inference Extension, built from its Go module at the
// release pinned in go.mod, so tests run the upstream picker rather than a stand-in.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/gateway-api-inference-extension/cmd/epp/runner"
)

func main() {
	if err := runner.NewRunner().Run(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
