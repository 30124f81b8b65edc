package classify

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/bbr/framework"
)

func ptr(v int) *int { return &v }

func seeds(t *testing.T) *Plugin {
	t.Helper()
	p, err := New(Config{PriorityField: "priority", Classes: []Class{
		{Objective: "llm-short", MinPromptTokens: 0, EnginePriority: ptr(-2)},
		{Objective: "llm-long", MinPromptTokens: 2049, EnginePriority: ptr(0)},
		{Objective: "llm-medium", MinPromptTokens: 513, EnginePriority: ptr(-1)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(headers map[string]string, body map[string]any) *framework.InferenceRequest {
	r := framework.NewInferenceRequest()
	for k, v := range headers {
		r.Headers[k] = v
	}
	r.Body = body
	return r
}

func words(n int) string { return strings.TrimSpace(strings.Repeat("w ", n)) }

func TestPromptLengthPicksTheClass(t *testing.T) {
	p := seeds(t)
	for tokens, want := range map[int]string{1: "llm-short", 512: "llm-short", 513: "llm-medium", 2048: "llm-medium", 2049: "llm-long"} {
		r := request(nil, map[string]any{"prompt": words(tokens)})
		if err := p.ProcessRequest(context.Background(), nil, r); err != nil {
			t.Fatal(err)
		}
		if got := r.MutatedHeaders()[DefaultHeader]; got != want {
			t.Errorf("%d tokens: objective %q, want %q", tokens, got, want)
		}
	}
}

func TestClientHeaderWins(t *testing.T) {
	r := request(map[string]string{"X-Gateway-Inference-Objective": "llm-long"}, map[string]any{"prompt": "short"})
	if err := seeds(t).ProcessRequest(context.Background(), nil, r); err != nil {
		t.Fatal(err)
	}
	if _, set := r.MutatedHeaders()[DefaultHeader]; set {
		t.Errorf("the client's objective was replaced: %v", r.MutatedHeaders())
	}
	if got := r.Body["priority"]; got != 0 {
		t.Errorf("engine priority of the client's class: %v, want 0", got)
	}
}

func TestEnginePrioritySetUnlessTheClientDid(t *testing.T) {
	p := seeds(t)
	r := request(nil, map[string]any{"prompt": words(600)})
	_ = p.ProcessRequest(context.Background(), nil, r)
	if got := r.Body["priority"]; got != -1 || !r.BodyMutated() {
		t.Errorf("priority %v, want -1 written to the body", got)
	}
	kept := request(nil, map[string]any{"prompt": words(600), "priority": 7.0})
	_ = p.ProcessRequest(context.Background(), nil, kept)
	if got := kept.Body["priority"]; got != 7.0 {
		t.Errorf("the client's priority was replaced by %v", got)
	}
}

func TestTokenEstimate(t *testing.T) {
	cases := []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"prompt": []any{1.0, 2.0, 3.0}}, 3},
		{map[string]any{"prompt": "w w w"}, 3},
		{map[string]any{"prompt": strings.Repeat("x", 40)}, 10},
		{map[string]any{"messages": []any{
			map[string]any{"role": "system", "content": "a b"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "c d e"}}},
		}}, 5},
	}
	for _, c := range cases {
		if got := PromptTokens(c.body); got != c.want {
			t.Errorf("%v: %d tokens, want %d", c.body, got, c.want)
		}
	}
}

func TestConfigNeedsClasses(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("a configuration without classes was accepted")
	}
	if _, err := Factory("x", []byte(`{"classes":[{"minPromptTokens":1}]}`), nil); err == nil {
		t.Error("a class without an objective was accepted")
	}
}
