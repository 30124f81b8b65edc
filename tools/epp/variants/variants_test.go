package variants

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

const label = "inference.ascendfleet.io/variant"

func endpoint(pod, variant string) scheduling.Endpoint {
	meta := &fwkdl.EndpointMetadata{PodName: pod, Labels: map[string]string{label: variant}}
	return scheduling.NewEndpoint(meta, &fwkdl.Metrics{}, fwkdl.NewAttributes())
}

func build(t *testing.T) *Filter {
	t.Helper()
	raw, _ := json.Marshal(Config{Label: label, Models: map[string]string{"qwen-fp16": "fp16", "qwen-int8": "int8"}})
	built, err := Factory("variants", raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return built.(*Filter)
}

func pods(endpoints []scheduling.Endpoint) []string {
	names := []string{}
	for _, e := range endpoints {
		names = append(names, e.GetMetadata().PodName)
	}
	return names
}

func TestKeepsOnlyTheTargetModelsVariant(t *testing.T) {
	pool := []scheduling.Endpoint{endpoint("r0", "fp16"), endpoint("r1", "int8"), endpoint("r2", "fp16"), endpoint("r3", "int8")}
	filter := build(t)
	for model, want := range map[string][]string{"qwen-int8": {"r1", "r3"}, "qwen-fp16": {"r0", "r2"}} {
		got := pods(filter.Filter(context.Background(), nil, &scheduling.LLMRequest{TargetModel: model}, pool))
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%s: kept %v, want %v", model, got, want)
		}
	}
}

func TestAnUnknownModelKeepsEveryEndpointAndAMissingVariantNone(t *testing.T) {
	pool := []scheduling.Endpoint{endpoint("r0", "fp16")}
	filter := build(t)
	if got := filter.Filter(context.Background(), nil, &scheduling.LLMRequest{TargetModel: "other"}, pool); len(got) != 1 {
		t.Errorf("unknown model: kept %v, want every endpoint", pods(got))
	}
	if got := filter.Filter(context.Background(), nil, &scheduling.LLMRequest{TargetModel: "qwen-int8"}, pool); len(got) != 0 {
		t.Errorf("no int8 endpoint: kept %v, want none", pods(got))
	}
}

func TestParametersAreRequired(t *testing.T) {
	for _, raw := range []string{"", `{"label": ""}`, `{"label": "x", "models": {}}`, `[1]`} {
		if _, err := Factory("v", json.RawMessage(raw), nil); err == nil {
			t.Errorf("parameters %q: accepted, want an error", raw)
		}
	}
}
