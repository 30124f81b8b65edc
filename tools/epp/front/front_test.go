package front

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"ascend-fleet.dev/epp/classify"
)

func TestArgsWithoutTheFlagAreTheCommandLine(t *testing.T) {
	in := []string{"--pool-name", "llm", "--grpc-port", "9002"}
	out, settings, err := Args(in)
	if err != nil || settings != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("got %v %v %v", out, settings, err)
	}
}

func TestTheFrontTakesThePublicPort(t *testing.T) {
	out, settings, err := Args([]string{Flag, "--pool-name", "llm", "--grpc-port", "7000", PortFlag + "=7001", "--zap-encoder", "json"})
	if err != nil {
		t.Fatal(err)
	}
	if *settings != (Settings{Port: 7000, PickerPort: 7001, Secure: true}) {
		t.Fatalf("settings %+v", *settings)
	}
	want := []string{"--pool-name", "llm", "--zap-encoder", "json", "--grpc-port", "7001", "--secure-serving=false"}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("picker args %v", out)
	}
	_, settings, _ = Args([]string{Flag, "--secure-serving=false"})
	if settings.Secure || settings.Port != 9002 || settings.PickerPort != DefaultPickerPort {
		t.Fatalf("defaults %+v", *settings)
	}
	if _, _, err := Args([]string{Flag, "--grpc-port", "9012"}); err == nil {
		t.Fatal("the same port for both was accepted")
	}
}

func classifier(t *testing.T) *classify.Plugin {
	short, long := -2, 0
	p, err := classify.New(classify.Config{
		Classes: []classify.Class{
			{Objective: "llm-short", MinPromptTokens: 0, EnginePriority: &short},
			{Objective: "llm-long", MinPromptTokens: 100, EnginePriority: &long},
		},
		PriorityField: "priority",
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func headersMessage(headers map[string]string) *extProcPb.ProcessingRequest {
	var values []*corev3.HeaderValue
	for k, v := range headers {
		values = append(values, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &corev3.HeaderMap{Headers: values}},
	}}
}

func header(m *extProcPb.ProcessingRequest, name string) []string {
	var found []string
	for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
		if h.GetKey() == name {
			found = append(found, headerValue(h))
		}
	}
	return found
}

func TestClassifySetsTheObjectiveAndThePriority(t *testing.T) {
	held := headersMessage(map[string]string{":path": "/v1/completions"})
	body := []byte(`{"model":"qwen","prompt":"` + strings.Repeat("word ", 150) + `"}`)
	last := &extProcPb.ProcessingRequest{ObservabilityMode: true, Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: body[10:], EndOfStream: true}}}
	headers, whole := Classify(context.Background(), classifier(t), held, last, body)
	if got := header(headers, classify.DefaultHeader); !reflect.DeepEqual(got, []string{"llm-long"}) {
		t.Fatalf("objective header %v", got)
	}
	if len(header(held, classify.DefaultHeader)) != 0 {
		t.Fatal("the held message itself was changed")
	}
	if !whole.GetRequestBody().GetEndOfStream() || !whole.ObservabilityMode {
		t.Fatal("the body message lost end of stream or the last message's fields")
	}
	var sent map[string]any
	if err := json.Unmarshal(whole.GetRequestBody().GetBody(), &sent); err != nil {
		t.Fatal(err)
	}
	if sent["priority"] != float64(0) || sent["model"] != "qwen" {
		t.Fatalf("body %v", sent)
	}
}

func TestAClientsObjectiveWinsAndBadBodiesPass(t *testing.T) {
	held := headersMessage(map[string]string{classify.DefaultHeader: "llm-short"})
	body := []byte(`{"model":"qwen","prompt":"` + strings.Repeat("word ", 150) + `"}`)
	headers, _ := Classify(context.Background(), classifier(t), held, nil, body)
	if got := header(headers, classify.DefaultHeader); !reflect.DeepEqual(got, []string{"llm-short"}) {
		t.Fatalf("objective header %v", got)
	}
	_, whole := Classify(context.Background(), classifier(t), headersMessage(nil), nil, []byte("not json"))
	if string(whole.GetRequestBody().GetBody()) != "not json" {
		t.Fatal("a body that is not JSON was changed")
	}
}

func TestThePluginRefusesWithoutTheFront(t *testing.T) {
	raw := json.RawMessage(`{"classes":[{"objective":"llm-short","minPromptTokens":0}]}`)
	if _, err := PluginFactory("c", raw, nil); err == nil || !strings.Contains(err.Error(), Flag) {
		t.Fatalf("no front, got %v", err)
	}
	Enable()
	if _, err := PluginFactory("c", raw, nil); err != nil || classifierInUse() == nil {
		t.Fatalf("with the front: %v", err)
	}
}

func TestBodiesGoToThePickerInPieces(t *testing.T) {
	body := []byte(strings.Repeat("x", 2*ChunkSize+5))
	whole := &extProcPb.ProcessingRequest{ObservabilityMode: true, Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: body, EndOfStream: true}}}
	pieces := Chunks(whole, ChunkSize)
	if len(pieces) != 3 {
		t.Fatalf("%d pieces", len(pieces))
	}
	var joined []byte
	for i, piece := range pieces {
		joined = append(joined, piece.GetRequestBody().GetBody()...)
		if piece.GetRequestBody().GetEndOfStream() != (i == 2) || !piece.ObservabilityMode {
			t.Fatalf("piece %d: end of stream %v", i, piece.GetRequestBody().GetEndOfStream())
		}
	}
	if string(joined) != string(body) {
		t.Fatal("the pieces are not the body")
	}
	empty := &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{RequestBody: &extProcPb.HttpBody{}}}
	if pieces := Chunks(empty, ChunkSize); len(pieces) != 1 || !pieces[0].GetRequestBody().GetEndOfStream() {
		t.Fatal("an empty body is one message that ends the stream")
	}
}
