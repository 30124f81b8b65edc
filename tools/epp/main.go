// The endpoint picker (EPP) of the Gateway API Inference Extension, built from its Go module at the
// release pinned in go.mod, so tests run the upstream picker rather than a stand-in. It adds what the upstream
// release lacks: one scheduling filter (variants/), used only by fleets with spec.variants, prefill/decode
// scheduling (disaggregation/), used only by disaggregated fleets, and the prompt-length classifier in front of
// the picker in the same process (front/, with --classify-requests), used by fleets with priority classes, and
// an in-flight limit per endpoint that adapts to a first-token target (adaptive/), used by fleets with
// spec.batching.ttftTarget.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/gateway-api-inference-extension/cmd/epp/runner"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"ascend-fleet.dev/epp/adaptive"
	"ascend-fleet.dev/epp/classify"
	"ascend-fleet.dev/epp/disaggregation"
	"ascend-fleet.dev/epp/front"
	"ascend-fleet.dev/epp/variants"
)

func main() {
	plugin.Register(variants.PluginType, variants.Factory)
	plugin.Register(disaggregation.RoleFilterType, disaggregation.RoleFilterFactory)
	plugin.Register(disaggregation.ProfileHandlerType, disaggregation.ProfileHandlerFactory)
	plugin.Register(disaggregation.PairFilterType, disaggregation.PairFilterFactory)
	plugin.Register(disaggregation.PrefillHeaderType, disaggregation.PrefillHeaderFactory)
	plugin.Register(classify.PluginType, front.PluginFactory)
	plugin.Register(adaptive.PluginType, adaptive.Factory)
	args, settings, err := front.Args(os.Args[1:])
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	ctx := ctrl.SetupSignalHandler()
	failed := make(chan error, 1)
	if settings != nil {
		front.Enable()
		os.Args = append([]string{os.Args[0]}, args...) // the picker parses os.Args itself
		go func() { failed <- front.Serve(ctx, settings.Port, settings.PickerPort, settings.Secure) }()
	}
	go func() { failed <- runner.NewRunner().Run(ctx) }()
	if err := <-failed; err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
