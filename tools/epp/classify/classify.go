// Package classify is a body-based routing plugin of the Gateway API Inference Extension: it puts a request
// that names no objective into the priority class its prompt length reaches, by setting the objective header
// the endpoint picker reads, before the picker sees the request.
package classify

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/bbr/framework"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// PluginType is the name the plugin is registered under (the `--plugin <type>:<name>:<json>` flag).
const PluginType = "prompt-length-objective"

// DefaultHeader is the header the endpoint picker resolves a request's InferenceObjective from.
const DefaultHeader = "x-gateway-inference-objective"

// CharsPerToken is the estimate's characters per token where no tokenizer is loaded (English text averages
// about four characters per token with the common BPE vocabularies).
const CharsPerToken = 4

// Class is one priority class: its InferenceObjective, the prompt tokens it starts at and, when set, the
// value written into the request body's priority field for the engine's own scheduler.
type Class struct {
	Objective       string `json:"objective"`
	MinPromptTokens int    `json:"minPromptTokens"`
	EnginePriority  *int   `json:"enginePriority,omitempty"`
}

// Config is the plugin's JSON parameters.
type Config struct {
	Header  string  `json:"header,omitempty"`
	Classes []Class `json:"classes"`
	// PriorityField, when set, is the body field the class's EnginePriority is written to (vLLM and SGLang
	// both read `priority`); a value the client put there is kept.
	PriorityField string `json:"priorityField,omitempty"`
}

// Plugin classes requests by prompt length.
type Plugin struct {
	typedName     plugin.TypedName
	header        string
	classes       []Class // by MinPromptTokens, largest first
	priorityField string
}

var _ framework.RequestProcessor = &Plugin{}

// Factory builds the plugin from its `--plugin` parameters.
func Factory(name string, raw json.RawMessage, _ framework.Handle) (framework.BBRPlugin, error) {
	var config Config
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &config); err != nil {
			return nil, fmt.Errorf("parameters of %q: %w", PluginType, err)
		}
	}
	p, err := New(config)
	if err != nil {
		return nil, err
	}
	p.typedName.Name = name
	return p, nil
}

// New checks a configuration and builds the plugin from it.
func New(config Config) (*Plugin, error) {
	if len(config.Classes) == 0 {
		return nil, fmt.Errorf("%s needs at least one class", PluginType)
	}
	classes := append([]Class(nil), config.Classes...)
	for _, c := range classes {
		if c.Objective == "" {
			return nil, fmt.Errorf("%s: every class needs an objective", PluginType)
		}
	}
	sort.SliceStable(classes, func(i, j int) bool { return classes[i].MinPromptTokens > classes[j].MinPromptTokens })
	header := config.Header
	if header == "" {
		header = DefaultHeader
	}
	return &Plugin{
		typedName:     plugin.TypedName{Type: PluginType, Name: PluginType},
		header:        strings.ToLower(header),
		classes:       classes,
		priorityField: config.PriorityField,
	}, nil
}

// TypedName is the plugin's type and instance name.
func (p *Plugin) TypedName() plugin.TypedName { return p.typedName }

// ProcessRequest sets the objective header from the prompt's length unless the client sent one.
func (p *Plugin) ProcessRequest(ctx context.Context, _ *framework.CycleState, request *framework.InferenceRequest) error {
	logger := log.FromContext(ctx)
	if sent := headerValue(request.Headers, p.header); sent != "" {
		if class, known := p.classNamed(sent); known {
			p.setEnginePriority(request, class)
		}
		logger.V(1).Info("objective sent by the client", "objective", sent)
		return nil
	}
	tokens := PromptTokens(request.Body)
	class := p.ClassFor(tokens)
	request.SetHeader(p.header, class.Objective)
	p.setEnginePriority(request, class)
	logger.Info("classified request", "promptTokens", tokens, "objective", class.Objective)
	return nil
}

func (p *Plugin) setEnginePriority(request *framework.InferenceRequest, class Class) {
	if p.priorityField == "" || class.EnginePriority == nil {
		return
	}
	if _, set := request.Body[p.priorityField]; !set {
		request.SetBodyField(p.priorityField, *class.EnginePriority)
	}
}

func (p *Plugin) classNamed(objective string) (Class, bool) {
	for _, c := range p.classes {
		if c.Objective == objective {
			return c, true
		}
	}
	return Class{}, false
}

// ClassFor is the class with the largest MinPromptTokens the prompt reaches (the smallest class otherwise).
func (p *Plugin) ClassFor(tokens int) Class {
	for _, c := range p.classes {
		if tokens >= c.MinPromptTokens {
			return c
		}
	}
	return p.classes[len(p.classes)-1]
}

func headerValue(headers map[string]string, name string) string {
	for key, value := range headers {
		if strings.ToLower(key) == name {
			return value
		}
	}
	return ""
}

// PromptTokens estimates a request's prompt tokens: a list of token ids counts exactly; text counts the larger
// of its whitespace-separated words and its characters over CharsPerToken.
func PromptTokens(body map[string]any) int {
	if prompt, ok := body["prompt"]; ok {
		return promptTokens(prompt)
	}
	total := 0
	if messages, ok := body["messages"].([]any); ok {
		for _, message := range messages {
			if m, ok := message.(map[string]any); ok {
				total += promptTokens(m["content"])
			}
		}
	}
	return total
}

func promptTokens(value any) int {
	switch v := value.(type) {
	case string:
		return textTokens(v)
	case []any:
		if len(v) > 0 {
			if _, ids := v[0].(float64); ids {
				return len(v)
			}
		}
		total := 0
		for _, part := range v {
			switch item := part.(type) {
			case map[string]any: // chat content parts: {"type": "text", "text": ...}
				total += promptTokens(item["text"])
			default:
				total += promptTokens(item)
			}
		}
		return total
	}
	return 0
}

func textTokens(text string) int {
	words := len(strings.Fields(text))
	chars := int(math.Ceil(float64(utf8.RuneCountInString(text)) / CharsPerToken))
	return max(words, chars)
}
