package disaggregation

import (
	"context"
	"testing"

	"github.com/go-logr/logr"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	source "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/fairness"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/ordering"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/usagelimits"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	upstream "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"
)

// pdConfig has the shape pd_scheduling renders (render/picker_config.py): the role filters named, the pair
// filter, profile handler and header handler by type only, each profile headed by its filters.
const pdConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 1}
- type: pd-role-filter
  name: decode-filter
  parameters: {label: inference.ascendfleet.io/role, roles: [decode]}
- type: pd-role-filter
  name: prefill-filter
  parameters: {label: inference.ascendfleet.io/role, roles: [prefill]}
- type: pd-pair-filter
  parameters: {label: inference.ascendfleet.io/revision}
- type: pd-profile-handler
- type: prefill-header-handler
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: pd-pair-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
`

// The picker's own configuration loader (the one its runner calls at start) builds a scheduler from a
// rendered-shape configuration with the P/D plugins, and that scheduler pairs by revision.
func TestThePickerLoadsTheRenderedShapeAndPairsByRevision(t *testing.T) {
	for kind, factory := range map[string]plugin.FactoryFunc{
		RoleFilterType: RoleFilterFactory, PairFilterType: PairFilterFactory,
		ProfileHandlerType: ProfileHandlerFactory, PrefillHeaderType: PrefillHeaderFactory,
		queuedepth.QueueScorerType: queuedepth.QueueScorerFactory, picker.MaxScorePickerType: picker.MaxScorePickerFactory,
		utilization.UtilizationDetectorType: utilization.UtilizationDetectorFactory, openai.OpenAIParserType: openai.OpenAIParserPluginFactory,
		source.MetricsDataSourceType: source.MetricsDataSourceFactory, metrics.MetricsExtractorType: metrics.CoreMetricsExtractorFactory,
		ordering.FCFSOrderingPolicyType: ordering.FCFSOrderingPolicyFactory, fairness.GlobalStrictFairnessPolicyType: fairness.GlobalStrictFairnessPolicyFactory,
		usagelimits.StaticUsageLimitPolicyType: usagelimits.StaticPolicyFactory,
	} {
		plugin.Register(kind, factory)
	}
	raw, _, err := loader.LoadRawConfig([]byte(pdConfig), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	handle := plugin.NewEppHandle(context.Background(), nil)
	loaded, err := loader.InstantiateAndConfigure(raw, handle, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	scheduler := upstream.NewSchedulerWithConfig(loaded.SchedulerConfig)
	pool := []scheduling.Endpoint{
		revised("d-new", "decode", "bbb", "10.0.1.1"),
		revised("p-old", "prefill", "aaa", "10.0.0.1"), revised("p-new", "prefill", "bbb", "10.0.0.2"),
	}
	for range 10 {
		result, err := scheduler.Schedule(context.Background(), &scheduling.LLMRequest{RequestId: "r"}, pool)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(result.ProfileResults["prefill"].TargetEndpoints); len(got) != 1 || got[0] != "p-new" {
			t.Fatalf("paired with %v, want p-new", got)
		}
	}
}
