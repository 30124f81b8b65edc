// Package variants is a scheduling filter for the endpoint picker: of the pool's endpoints it keeps those whose
// pod serves the request's target model, told by a pod label. The upstream picker rewrites a request's model
// by an InferenceModelRewrite's weights but then picks among every endpoint of the pool, as if each pod served
// every name (true of LoRA adapters, not of precision variants that run different weights on different pods).
package variants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// PluginType is the name the filter is registered under (a plugin's `type` in the EndpointPickerConfig).
const PluginType = "variant-filter"

// Config is the filter's parameters: the pod label that names a variant, and each served model name's variant.
type Config struct {
	Label  string            `json:"label"`
	Models map[string]string `json:"models"`
}

// Filter keeps the endpoints of the target model's variant.
type Filter struct {
	typedName plugin.TypedName
	config    Config
}

var _ scheduling.Filter = &Filter{}

// Factory builds the filter from its parameters; a label or a model table that is missing is an error, so a
// misconfigured picker refuses to start instead of sending requests to pods that cannot answer them.
func Factory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	var config Config
	if len(raw) == 0 {
		return nil, errors.New("variant-filter needs parameters: label and models")
	}
	if err := json.Unmarshal(raw, &config); err != nil {
		return nil, fmt.Errorf("variant-filter parameters: %w", err)
	}
	if config.Label == "" || len(config.Models) == 0 {
		return nil, errors.New("variant-filter needs a label and at least one model")
	}
	return &Filter{typedName: plugin.TypedName{Type: PluginType, Name: name}, config: config}, nil
}

// TypedName is the filter's type and instance name.
func (f *Filter) TypedName() plugin.TypedName {
	return f.typedName
}

// Filter returns the endpoints labelled with the target model's variant. A model the table does not name is
// left to every endpoint (the filter only narrows what it knows); a known model with no endpoint of its variant
// gets none, and the picker answers that no endpoint fits rather than letting another variant refuse the name.
func (f *Filter) Filter(ctx context.Context, _ *scheduling.CycleState, request *scheduling.LLMRequest, endpoints []scheduling.Endpoint) []scheduling.Endpoint {
	if request == nil {
		return endpoints
	}
	want, known := f.config.Models[request.TargetModel]
	if !known {
		return endpoints
	}
	kept := make([]scheduling.Endpoint, 0, len(endpoints))
	for _, endpoint := range endpoints {
		if meta := endpoint.GetMetadata(); meta != nil && meta.Labels[f.config.Label] == want {
			kept = append(kept, endpoint)
		}
	}
	if len(kept) == 0 {
		log.FromContext(ctx).Info("no endpoint serves the variant", "model", request.TargetModel, "variant", want)
	}
	return kept
}
