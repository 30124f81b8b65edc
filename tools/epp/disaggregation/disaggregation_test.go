package disaggregation

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

const roleLabel = "inference.ascendfleet.io/role"

func endpoint(pod, role, address, port string) scheduling.Endpoint {
	labels := map[string]string{}
	if role != "" {
		labels[roleLabel] = role
	}
	meta := &fwkdl.EndpointMetadata{PodName: pod, Address: address, Port: port, Labels: labels}
	return scheduling.NewEndpoint(meta, &fwkdl.Metrics{}, fwkdl.NewAttributes())
}

func names(endpoints []scheduling.Endpoint) []string {
	found := []string{}
	for _, e := range endpoints {
		found = append(found, e.GetMetadata().PodName)
	}
	return found
}

type profile struct{ name string }

func (p profile) Run(context.Context, *scheduling.LLMRequest, *scheduling.CycleState, []scheduling.Endpoint) (*scheduling.ProfileRunResult, error) {
	return nil, nil
}

func only(t *testing.T, picked map[string]scheduling.SchedulerProfile, want string) {
	t.Helper()
	if want == "" {
		if len(picked) != 0 {
			t.Fatalf("picked %v, want none", picked)
		}
		return
	}
	if len(picked) != 1 || picked[want] == nil || picked[want].(profile).name != want {
		t.Fatalf("picked %v, want only %s", picked, want)
	}
}

func roleFilter(t *testing.T, roles ...string) *RoleFilter {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"label": roleLabel, "roles": roles})
	built, err := RoleFilterFactory("roles", raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return built.(*RoleFilter)
}

func TestTheRoleFilterKeepsThePodsOfItsRoles(t *testing.T) {
	pool := []scheduling.Endpoint{
		endpoint("p0", "prefill", "", ""), endpoint("d0", "decode", "", ""),
		endpoint("b0", "both", "", ""), endpoint("u0", "", "", ""),
	}
	cases := map[string][]string{"prefill": {"p0"}, "decode": {"d0"}}
	for role, want := range cases {
		got := names(roleFilter(t, role).Filter(context.Background(), nil, nil, pool))
		if len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s kept %v, want %v", role, got, want)
		}
	}
	got := names(roleFilter(t, "decode", "both").Filter(context.Background(), nil, nil, pool))
	if len(got) != 2 || got[0] != "d0" || got[1] != "b0" {
		t.Errorf("decode and both kept %v", got)
	}
}

func TestTheRoleFilterRefusesToStartWithoutALabelOrRoles(t *testing.T) {
	for _, raw := range []string{"", `{"label": "x"}`, `{"roles": ["decode"]}`, `{"label": 3}`} {
		if _, err := RoleFilterFactory("roles", json.RawMessage(raw), nil); err == nil {
			t.Errorf("parameters %q accepted", raw)
		}
	}
}

func TestProfilesRunDecodeThenPrefillThenNothing(t *testing.T) {
	built, err := ProfileHandlerFactory("pd", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	handler := built.(*ProfileHandler)
	candidates := map[string]scheduling.SchedulerProfile{"decode": profile{"decode"}, "prefill": profile{"prefill"}}
	found := &scheduling.ProfileRunResult{TargetEndpoints: []scheduling.Endpoint{endpoint("d0", "decode", "10.0.0.1", "8000")}}
	pick := func(results map[string]*scheduling.ProfileRunResult) map[string]scheduling.SchedulerProfile {
		return handler.Pick(context.Background(), nil, nil, candidates, results)
	}
	only(t, pick(map[string]*scheduling.ProfileRunResult{}), "decode")
	only(t, pick(map[string]*scheduling.ProfileRunResult{"decode": found}), "prefill")
	only(t, pick(map[string]*scheduling.ProfileRunResult{"decode": nil}), "")
	only(t, pick(map[string]*scheduling.ProfileRunResult{"decode": found, "prefill": nil}), "")
	delete(candidates, "prefill")
	only(t, pick(map[string]*scheduling.ProfileRunResult{"decode": found}), "")
}

func TestTheDecodeEndpointIsTheDestinationAndThePrefillOneIsKept(t *testing.T) {
	built, _ := ProfileHandlerFactory("pd", json.RawMessage(`{"decodeProfile": "d", "prefillProfile": "p"}`), nil)
	handler := built.(*ProfileHandler)
	decoded := &scheduling.ProfileRunResult{TargetEndpoints: []scheduling.Endpoint{endpoint("d0", "decode", "10.0.0.1", "8000")}}
	prefilled := &scheduling.ProfileRunResult{TargetEndpoints: []scheduling.Endpoint{endpoint("p0", "prefill", "10.0.0.2", "8000")}}
	result, err := handler.ProcessResults(context.Background(), nil, nil, map[string]*scheduling.ProfileRunResult{"d": decoded, "p": prefilled})
	if err != nil || result.PrimaryProfileName != "d" || result.ProfileResults["d"] != decoded || result.ProfileResults["p"] != prefilled {
		t.Fatalf("result %+v, error %v", result, err)
	}
	result, err = handler.ProcessResults(context.Background(), nil, nil, map[string]*scheduling.ProfileRunResult{"d": decoded, "p": nil})
	if err != nil || len(result.ProfileResults) != 1 || result.PrimaryProfileName != "d" {
		t.Fatalf("without prefill: result %+v, error %v", result, err)
	}
	if _, err := handler.ProcessResults(context.Background(), nil, nil, map[string]*scheduling.ProfileRunResult{"d": nil}); err == nil {
		t.Fatal("a request without a decode endpoint was scheduled")
	}
}

func TestProfileNamesMustDiffer(t *testing.T) {
	for _, raw := range []string{`{"decodeProfile": "x", "prefillProfile": "x"}`, `{"decodeProfile": ""}`, `[`} {
		if _, err := ProfileHandlerFactory("pd", json.RawMessage(raw), nil); err == nil {
			t.Errorf("profile handler parameters %q accepted", raw)
		}
		if _, err := PrefillHeaderFactory("h", json.RawMessage(raw), nil); err == nil {
			t.Errorf("header handler parameters %q accepted", raw)
		}
	}
}

func TestTheHeaderNamesThePrefillEndpointAndReplacesTheClients(t *testing.T) {
	built, _ := PrefillHeaderFactory("h", nil, nil)
	handler := built.(*PrefillHeaderHandler)
	result := func(prefill scheduling.Endpoint) *scheduling.SchedulingResult {
		results := map[string]*scheduling.ProfileRunResult{
			"decode": {TargetEndpoints: []scheduling.Endpoint{endpoint("d0", "decode", "10.0.0.1", "8000")}},
		}
		if prefill != nil {
			results["prefill"] = &scheduling.ProfileRunResult{TargetEndpoints: []scheduling.Endpoint{prefill}}
		}
		return &scheduling.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: results}
	}
	cases := []struct {
		prefill scheduling.Endpoint
		want    string
	}{
		{endpoint("p0", "prefill", "10.0.0.2", "8200"), "10.0.0.2:8200"},
		{endpoint("p1", "prefill", "fd00::2", "8200"), "[fd00::2]:8200"},
		{nil, ""},
	}
	for _, c := range cases {
		request := &scheduling.LLMRequest{Headers: map[string]string{PrefillHeader: "evil.example:80"}}
		handler.PreRequest(context.Background(), request, result(c.prefill))
		if got, set := request.Headers[PrefillHeader]; !set || got != c.want {
			t.Errorf("header %q (set %v), want %q", got, set, c.want)
		}
	}
	request := &scheduling.LLMRequest{}
	handler.PreRequest(context.Background(), request, nil)
	if got, set := request.Headers[PrefillHeader]; !set || got != "" {
		t.Errorf("without a scheduling result the header is %q (set %v)", got, set)
	}
}
