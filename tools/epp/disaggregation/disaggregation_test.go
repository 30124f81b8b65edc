package disaggregation

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	upstream "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"
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

const revisionLabel = "inference.ascendfleet.io/revision"

// revised is an endpoint of a role and a fleet revision (empty: the pod has no revision label).
func revised(pod, role, revision, address string) scheduling.Endpoint {
	e := endpoint(pod, role, address, "8000")
	if revision != "" {
		e.GetMetadata().Labels[revisionLabel] = revision
	}
	return e
}

func pairFilter(t *testing.T) *PairFilter {
	t.Helper()
	built, err := PairFilterFactory("pair", json.RawMessage(`{"label": "`+revisionLabel+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return built.(*PairFilter)
}

// pdScheduler is the picker's scheduler (the upstream one) with the profiles pd_scheduling renders: a decode
// profile behind the decode role filter, a prefill profile behind the prefill role filter and the pair filter,
// each picking one endpoint.
func pdScheduler(t *testing.T) *upstream.Scheduler {
	t.Helper()
	built, _ := ProfileHandlerFactory("pd", nil, nil)
	decode := upstream.NewSchedulerProfile().WithFilters(roleFilter(t, "decode")).WithPicker(picker.NewMaxScorePicker(1))
	prefill := upstream.NewSchedulerProfile().WithFilters(roleFilter(t, "prefill"), pairFilter(t)).WithPicker(picker.NewMaxScorePicker(1))
	profiles := map[string]scheduling.SchedulerProfile{"decode": decode, "prefill": prefill}
	return upstream.NewSchedulerWithConfig(upstream.NewSchedulerConfig(built.(*ProfileHandler), profiles))
}

func TestThePrefillPodIsOneOfTheDecodePodsRevision(t *testing.T) {
	scheduler := pdScheduler(t)
	prefills := []scheduling.Endpoint{
		revised("p-old", "prefill", "aaa", "10.0.0.1"), revised("p-new", "prefill", "bbb", "10.0.0.2"),
		revised("p-none", "prefill", "", "10.0.0.3"),
	}
	for decode, want := range map[string]string{"aaa": "p-old", "bbb": "p-new"} {
		pool := append([]scheduling.Endpoint{revised("d-"+decode, "decode", decode, "10.0.1.1")}, prefills...)
		for range 20 { // the picker breaks ties at random: every draw must pair by revision
			result, err := scheduler.Schedule(context.Background(), &scheduling.LLMRequest{RequestId: "r"}, pool)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(result.ProfileResults["decode"].TargetEndpoints); len(got) != 1 || got[0] != "d-"+decode {
				t.Fatalf("decode %v", got)
			}
			prefilled := result.ProfileResults["prefill"]
			if prefilled == nil {
				t.Fatalf("decode of revision %s got no prefill pod", decode)
			}
			if got := names(prefilled.TargetEndpoints); len(got) != 1 || got[0] != want {
				t.Fatalf("decode of revision %s paired with %v, want %s", decode, got, want)
			}
		}
	}
}

func TestADecodePodWithoutAPrefillOfItsRevisionIsServedAlone(t *testing.T) {
	scheduler := pdScheduler(t)
	handler, _ := PrefillHeaderFactory("h", nil, nil)
	pool := []scheduling.Endpoint{revised("d-new", "decode", "bbb", "10.0.1.1"), revised("p-old", "prefill", "aaa", "10.0.0.1")}
	request := &scheduling.LLMRequest{RequestId: "r"}
	result, err := scheduler.Schedule(context.Background(), request, pool)
	if err != nil || result.PrimaryProfileName != "decode" {
		t.Fatalf("result %+v, error %v", result, err)
	}
	if _, paired := result.ProfileResults["prefill"]; paired {
		t.Fatalf("paired across revisions: %v", names(result.ProfileResults["prefill"].TargetEndpoints))
	}
	handler.(*PrefillHeaderHandler).PreRequest(context.Background(), request, result)
	if got := request.Headers[PrefillHeader]; got != "" {
		t.Fatalf("header %q, want empty: the decode engine computes the prompt itself", got)
	}
}

func TestThePairFilterKeepsNoneWithoutADecodeChoiceOrItsLabel(t *testing.T) {
	filter := pairFilter(t)
	pool := []scheduling.Endpoint{revised("p0", "prefill", "aaa", ""), revised("p1", "prefill", "", "")}
	if got := filter.Filter(context.Background(), nil, nil, pool); len(got) != 0 {
		t.Errorf("without a cycle state kept %v", names(got))
	}
	if got := filter.Filter(context.Background(), scheduling.NewCycleState(), nil, pool); len(got) != 0 {
		t.Errorf("without a decode choice kept %v", names(got))
	}
	state := scheduling.NewCycleState()
	state.Write(DecodeChoiceKey, &DecodeChoice{Endpoint: revised("d0", "decode", "", "")})
	if got := filter.Filter(context.Background(), state, nil, pool); len(got) != 0 {
		t.Errorf("for a decode pod without the label kept %v", names(got))
	}
	state.Write(DecodeChoiceKey, &DecodeChoice{Endpoint: revised("d0", "decode", "aaa", "")})
	if got := names(filter.Filter(context.Background(), state, nil, pool)); len(got) != 1 || got[0] != "p0" {
		t.Errorf("for a decode pod of revision aaa kept %v", got)
	}
}

func TestThePairFilterRefusesToStartWithoutALabel(t *testing.T) {
	for _, raw := range []string{"", `{}`, `{"label": ""}`, `{"label": 3}`} {
		if _, err := PairFilterFactory("pair", json.RawMessage(raw), nil); err == nil {
			t.Errorf("parameters %q accepted", raw)
		}
	}
}

func TestDecodeFallbacksAreOfTheNamedPrefillPodsRevision(t *testing.T) {
	built, _ := ProfileHandlerFactory("pd", nil, nil)
	decode := upstream.NewSchedulerProfile().WithFilters(roleFilter(t, "decode")).WithPicker(picker.NewMaxScorePicker(3))
	prefill := upstream.NewSchedulerProfile().WithFilters(roleFilter(t, "prefill"), pairFilter(t)).WithPicker(picker.NewMaxScorePicker(1))
	profiles := map[string]scheduling.SchedulerProfile{"decode": decode, "prefill": prefill}
	scheduler := upstream.NewSchedulerWithConfig(upstream.NewSchedulerConfig(built.(*ProfileHandler), profiles))
	revisionOf := map[string]string{"d-a1": "aaa", "d-a2": "aaa", "d-b": "bbb", "p-a": "aaa", "p-b": "bbb"}
	pool := []scheduling.Endpoint{
		revised("d-a1", "decode", "aaa", "10.0.1.1"), revised("d-a2", "decode", "aaa", "10.0.1.2"),
		revised("d-b", "decode", "bbb", "10.0.1.3"),
		revised("p-a", "prefill", "aaa", "10.0.0.1"), revised("p-b", "prefill", "bbb", "10.0.0.2"),
	}
	for range 30 { // random ties: each decode pod comes first in some draws
		result, err := scheduler.Schedule(context.Background(), &scheduling.LLMRequest{RequestId: "r"}, pool)
		if err != nil {
			t.Fatal(err)
		}
		decoded := names(result.ProfileResults["decode"].TargetEndpoints)
		prefilled := names(result.ProfileResults["prefill"].TargetEndpoints)
		want := map[string]int{"aaa": 2, "bbb": 1}[revisionOf[decoded[0]]]
		if len(decoded) != want || len(prefilled) != 1 {
			t.Fatalf("decode %v (want %d of its revision), prefill %v", decoded, want, prefilled)
		}
		for _, name := range decoded {
			if revisionOf[name] != revisionOf[prefilled[0]] {
				t.Fatalf("decode %v may be retried with prefill %v of another revision", decoded, prefilled)
			}
		}
	}
	// Without a prefill pod of its revision the request is the decode pods' alone: every fallback stays.
	alone := []scheduling.Endpoint{pool[0], pool[1], pool[2], pool[4]}
	for range 30 {
		result, _ := scheduler.Schedule(context.Background(), &scheduling.LLMRequest{RequestId: "r"}, alone)
		if got := names(result.ProfileResults["decode"].TargetEndpoints); revisionOf[got[0]] == "aaa" && len(got) != 3 {
			t.Fatalf("decode %v without a prefill pod lost fallbacks", got)
		}
	}
}
