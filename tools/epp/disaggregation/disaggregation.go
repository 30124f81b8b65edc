// Package disaggregation is prefill/decode scheduling for the endpoint picker: each request gets a decode
// endpoint, where it is sent, and a prefill endpoint, named to the decode pod's P/D sidecar in a header; the
// sidecar has the prefill engine compute the prompt's KV cache first, then lets the decode engine generate
// with it. Three plugins, registered by main.go:
//
//   - pd-role-filter keeps the endpoints whose pod carries one of the given values of a role label; one
//     instance in the decode profile, one in the prefill profile;
//   - pd-profile-handler runs the decode profile, then the prefill profile when the decode one found an
//     endpoint, and makes the decode endpoint the request's destination;
//   - pd-pair-filter, in the prefill profile, keeps the endpoints whose pod has the same value of a label as
//     the decode pod the decode profile chose (the fleet's revision: a rollout never pairs a decode engine
//     with a prefill engine of another version);
//   - prefill-header-handler writes the chosen prefill endpoint's host:port into x-prefiller-host-port.
//
// The behaviour is that of llm-d-inference-scheduler's P/D plugins (the header is the one its pd-sidecar
// reads), written against this picker's release: that project's releases build on an older picker API. The
// pair filter is the project's own: llm-d pairs any prefill pod with any decode pod.
package disaggregation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

const (
	// RoleFilterType, ProfileHandlerType and PrefillHeaderType are the plugins' `type` in the EndpointPickerConfig.
	RoleFilterType     = "pd-role-filter"
	ProfileHandlerType = "pd-profile-handler"
	PairFilterType     = "pd-pair-filter"
	PrefillHeaderType  = "prefill-header-handler"

	// DecodeChoiceKey is where the profile handler leaves the decode endpoint in the scheduling cycle's state
	// before it runs the prefill profile, for the pair filter to read; PairKey is where the pair filter leaves
	// the label and value it paired by, for the profile handler to trim the decode fallbacks to.
	DecodeChoiceKey plugin.StateKey = "pd-decode-choice"
	PairKey         plugin.StateKey = "pd-pair"

	// PrefillHeader names the prefill endpoint (host:port) to the decode pod's sidecar; llm-d's pd-sidecar
	// reads this header.
	PrefillHeader = "x-prefiller-host-port"

	// DefaultDecodeProfile and DefaultPrefillProfile are the scheduling profiles' names unless configured.
	DefaultDecodeProfile  = "decode"
	DefaultPrefillProfile = "prefill"
)

// Profiles names the two scheduling profiles (the parameters of the profile handler and the header handler).
type Profiles struct {
	Decode  string `json:"decodeProfile"`
	Prefill string `json:"prefillProfile"`
}

func profiles(kind string, raw json.RawMessage) (Profiles, error) {
	names := Profiles{Decode: DefaultDecodeProfile, Prefill: DefaultPrefillProfile}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &names); err != nil {
			return names, fmt.Errorf("%s parameters: %w", kind, err)
		}
	}
	if names.Decode == "" || names.Prefill == "" || names.Decode == names.Prefill {
		return names, fmt.Errorf("%s needs two distinct profile names, got decode %q and prefill %q", kind, names.Decode, names.Prefill)
	}
	return names, nil
}

// RoleFilter keeps the endpoints whose pod's Label has one of Roles.
type RoleFilter struct {
	typedName plugin.TypedName
	Label     string   `json:"label"`
	Roles     []string `json:"roles"`
}

var _ scheduling.Filter = &RoleFilter{}

// RoleFilterFactory builds a role filter; a missing label or role list is an error, so a misconfigured picker
// refuses to start rather than mixing prefill and decode pods.
func RoleFilterFactory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	filter := &RoleFilter{typedName: plugin.TypedName{Type: RoleFilterType, Name: name}}
	if len(raw) == 0 {
		return nil, errors.New("pd-role-filter needs parameters: label and roles")
	}
	if err := json.Unmarshal(raw, filter); err != nil {
		return nil, fmt.Errorf("pd-role-filter parameters: %w", err)
	}
	if filter.Label == "" || len(filter.Roles) == 0 {
		return nil, errors.New("pd-role-filter needs a label and at least one role")
	}
	return filter, nil
}

// TypedName is the filter's type and instance name.
func (f *RoleFilter) TypedName() plugin.TypedName {
	return f.typedName
}

// Filter returns the endpoints of the configured roles, in their order.
func (f *RoleFilter) Filter(_ context.Context, _ *scheduling.CycleState, _ *scheduling.LLMRequest, endpoints []scheduling.Endpoint) []scheduling.Endpoint {
	kept := make([]scheduling.Endpoint, 0, len(endpoints))
	for _, endpoint := range endpoints {
		meta := endpoint.GetMetadata()
		if meta == nil {
			continue
		}
		for _, role := range f.Roles {
			if value, found := meta.Labels[f.Label]; found && value == role {
				kept = append(kept, endpoint)
				break
			}
		}
	}
	return kept
}

// ProfileHandler runs the decode profile, then the prefill one, and answers with the decode endpoints.
type ProfileHandler struct {
	typedName plugin.TypedName
	profiles  Profiles
}

var _ scheduling.ProfileHandler = &ProfileHandler{}

// ProfileHandlerFactory builds the profile handler; parameters decodeProfile and prefillProfile are optional.
func ProfileHandlerFactory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	names, err := profiles(ProfileHandlerType, raw)
	if err != nil {
		return nil, err
	}
	return &ProfileHandler{typedName: plugin.TypedName{Type: ProfileHandlerType, Name: name}, profiles: names}, nil
}

// TypedName is the handler's type and instance name.
func (h *ProfileHandler) TypedName() plugin.TypedName {
	return h.typedName
}

// Pick chooses the next profile to run: decode first; prefill once decode found an endpoint, which it then
// leaves in the cycle's state (DecodeChoiceKey) for the pair filter; then none. A decode profile that found
// nothing ends the cycle (there is nowhere to send the request).
func (h *ProfileHandler) Pick(_ context.Context, cycleState *scheduling.CycleState, _ *scheduling.LLMRequest,
	candidates map[string]scheduling.SchedulerProfile, results map[string]*scheduling.ProfileRunResult) map[string]scheduling.SchedulerProfile {
	decoded, ran := results[h.profiles.Decode]
	if !ran {
		return map[string]scheduling.SchedulerProfile{h.profiles.Decode: candidates[h.profiles.Decode]}
	}
	if _, prefilled := results[h.profiles.Prefill]; prefilled || decoded == nil {
		return map[string]scheduling.SchedulerProfile{}
	}
	prefill, configured := candidates[h.profiles.Prefill]
	if !configured {
		return map[string]scheduling.SchedulerProfile{}
	}
	if cycleState != nil && len(decoded.TargetEndpoints) > 0 {
		cycleState.Write(DecodeChoiceKey, &DecodeChoice{Endpoint: decoded.TargetEndpoints[0]})
	}
	return map[string]scheduling.SchedulerProfile{h.profiles.Prefill: prefill}
}

// pairedFallbacks is decoded with only the endpoints of the pair filter's value (the first, the one it paired
// with, always); decoded itself when no pair filter ran.
func pairedFallbacks(cycleState *scheduling.CycleState, decoded *scheduling.ProfileRunResult) *scheduling.ProfileRunResult {
	if cycleState == nil {
		return decoded
	}
	pair, err := scheduling.ReadCycleStateKey[*Pair](cycleState, PairKey)
	if err != nil || pair == nil {
		return decoded
	}
	trimmed := &scheduling.ProfileRunResult{TargetEndpoints: decoded.TargetEndpoints[:1:1]}
	for _, endpoint := range decoded.TargetEndpoints[1:] {
		if meta := endpoint.GetMetadata(); meta != nil {
			if value, has := meta.Labels[pair.Label]; has && value == pair.Value {
				trimmed.TargetEndpoints = append(trimmed.TargetEndpoints, endpoint)
			}
		}
	}
	return trimmed
}

// Pair is the label and value the pair filter kept prefill endpoints by.
type Pair struct {
	Label, Value string
}

// Clone copies the pair.
func (p *Pair) Clone() plugin.StateData {
	return &Pair{Label: p.Label, Value: p.Value}
}

// DecodeChoice is the decode endpoint the decode profile chose (the request's destination), kept in the
// scheduling cycle's state while the prefill profile runs.
type DecodeChoice struct {
	Endpoint scheduling.Endpoint
}

// Clone copies the choice (the endpoint itself is shared, as the scheduler shares it between profiles).
func (c *DecodeChoice) Clone() plugin.StateData {
	return &DecodeChoice{Endpoint: c.Endpoint}
}

// PairFilter keeps the endpoints whose pod's Label has the value of the chosen decode pod's.
type PairFilter struct {
	typedName plugin.TypedName
	Label     string `json:"label"`
}

var _ scheduling.Filter = &PairFilter{}

// PairFilterFactory builds a pair filter; a missing label is an error, as for the role filter.
func PairFilterFactory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	filter := &PairFilter{typedName: plugin.TypedName{Type: PairFilterType, Name: name}}
	if len(raw) == 0 {
		return nil, errors.New("pd-pair-filter needs parameters: label")
	}
	if err := json.Unmarshal(raw, filter); err != nil {
		return nil, fmt.Errorf("pd-pair-filter parameters: %w", err)
	}
	if filter.Label == "" {
		return nil, errors.New("pd-pair-filter needs a label")
	}
	return filter, nil
}

// TypedName is the filter's type and instance name.
func (f *PairFilter) TypedName() plugin.TypedName {
	return f.typedName
}

// Filter returns the endpoints whose Label equals the decode pod's, in their order. Without a decode choice
// (the filter outside a prefill profile the handler runs) or a decode pod without the label it keeps none:
// the request then goes to the decode pod alone, which computes the prompt itself, rather than to a prefill
// pod whose KV it may not be able to read.
func (f *PairFilter) Filter(ctx context.Context, cycleState *scheduling.CycleState, _ *scheduling.LLMRequest, endpoints []scheduling.Endpoint) []scheduling.Endpoint {
	kept := []scheduling.Endpoint{}
	want, found := f.decodeValue(cycleState)
	if !found {
		log.FromContext(ctx).Info("no decode pod to pair with; no prefill endpoint kept", "label", f.Label)
		return kept
	}
	cycleState.Write(PairKey, &Pair{Label: f.Label, Value: want})
	for _, endpoint := range endpoints {
		if meta := endpoint.GetMetadata(); meta != nil {
			if value, has := meta.Labels[f.Label]; has && value == want {
				kept = append(kept, endpoint)
			}
		}
	}
	return kept
}

func (f *PairFilter) decodeValue(cycleState *scheduling.CycleState) (string, bool) {
	if cycleState == nil {
		return "", false
	}
	choice, err := scheduling.ReadCycleStateKey[*DecodeChoice](cycleState, DecodeChoiceKey)
	if err != nil || choice == nil || choice.Endpoint == nil {
		return "", false
	}
	meta := choice.Endpoint.GetMetadata()
	if meta == nil {
		return "", false
	}
	value, has := meta.Labels[f.Label]
	return value, has
}

// ProcessResults makes the decode profile primary (its endpoints receive the request) and keeps the prefill
// result for the header handler. A failed prefill profile leaves the request to decode alone: the sidecar,
// given no prefill endpoint, forwards it to its engine, which then computes the prompt itself. With a prefill
// endpoint chosen by a pair filter, the decode fallbacks (endpoints after the first, which the gateway may
// retry on with the same header) are only those of the pair's value: a retry never reaches a decode pod of
// another revision than the prefill pod named.
func (h *ProfileHandler) ProcessResults(ctx context.Context, cycleState *scheduling.CycleState, _ *scheduling.LLMRequest,
	results map[string]*scheduling.ProfileRunResult) (*scheduling.SchedulingResult, error) {
	decoded := results[h.profiles.Decode]
	if decoded == nil || len(decoded.TargetEndpoints) == 0 {
		return nil, errors.New("no decode endpoint is available")
	}
	kept := map[string]*scheduling.ProfileRunResult{h.profiles.Decode: decoded}
	if prefilled := results[h.profiles.Prefill]; prefilled != nil && len(prefilled.TargetEndpoints) > 0 {
		kept[h.profiles.Prefill] = prefilled
		kept[h.profiles.Decode] = pairedFallbacks(cycleState, decoded)
	} else {
		log.FromContext(ctx).Info("no prefill endpoint; the decode endpoint computes the prompt itself")
	}
	return &scheduling.SchedulingResult{PrimaryProfileName: h.profiles.Decode, ProfileResults: kept}, nil
}

// PrefillHeaderHandler writes the prefill endpoint chosen by the prefill profile into PrefillHeader.
type PrefillHeaderHandler struct {
	typedName plugin.TypedName
	profiles  Profiles
}

var _ requestcontrol.PreRequest = &PrefillHeaderHandler{}

// PrefillHeaderFactory builds the header handler; parameters as the profile handler's.
func PrefillHeaderFactory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	names, err := profiles(PrefillHeaderType, raw)
	if err != nil {
		return nil, err
	}
	return &PrefillHeaderHandler{typedName: plugin.TypedName{Type: PrefillHeaderType, Name: name}, profiles: names}, nil
}

// TypedName is the handler's type and instance name.
func (p *PrefillHeaderHandler) TypedName() plugin.TypedName {
	return p.typedName
}

// PreRequest sets the header to the prefill endpoint's host:port. It always sets it, to an empty value when no
// prefill endpoint was chosen: the picker's header mutations replace what the client sent, so a client cannot
// name a prefill endpoint of its own choosing.
func (p *PrefillHeaderHandler) PreRequest(_ context.Context, request *scheduling.LLMRequest, result *scheduling.SchedulingResult) {
	if request.Headers == nil {
		request.Headers = map[string]string{}
	}
	request.Headers[PrefillHeader] = ""
	if result == nil {
		return
	}
	prefilled := result.ProfileResults[p.profiles.Prefill]
	if prefilled == nil || len(prefilled.TargetEndpoints) == 0 {
		return
	}
	meta := prefilled.TargetEndpoints[0].GetMetadata()
	if meta == nil || meta.Address == "" || meta.Port == "" {
		return
	}
	request.Headers[PrefillHeader] = net.JoinHostPort(meta.Address, meta.Port)
}
