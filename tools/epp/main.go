// The endpoint picker (EPP) of the Gateway API Inference Extension, built from its Go module at the
// release pinned in go.mod, so tests run the upstream picker rather than a stand-in. It adds what the upstream
// release lacks: one scheduling filter (variants/), used only by fleets with spec.variants, and prefill/decode
// scheduling (disaggregation/), used only by disaggregated fleets.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/gateway-api-inference-extension/cmd/epp/runner"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"ascend-fleet.dev/epp/disaggregation"
	"ascend-fleet.dev/epp/variants"
)

func main() {
	plugin.Register(variants.PluginType, variants.Factory)
	plugin.Register(disaggregation.RoleFilterType, disaggregation.RoleFilterFactory)
	plugin.Register(disaggregation.ProfileHandlerType, disaggregation.ProfileHandlerFactory)
	plugin.Register(disaggregation.PrefillHeaderType, disaggregation.PrefillHeaderFactory)
	if err := runner.NewRunner().Run(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
