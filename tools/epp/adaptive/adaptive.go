// Package adaptive is an in-flight limit per endpoint for the endpoint picker that adapts to a first-token
// target: the seeds' AdaptiveBatchScheduler, moved from the engine to the router. The engine batches whatever
// it has been sent, so the number of requests the picker keeps in flight on an endpoint is, in effect, the
// batch the engine runs; a fixed limit (batching.maxBatchSize) is either too large for long prompts (the
// first token waits behind a full batch) or too small for short ones.
//
// One plugin, three hooks:
//
//   - Filter (scheduling) passes over the endpoints whose in-flight count has reached their limit L; when that
//     would leave none it keeps them all, so the request is left to the saturation detector and flow control
//     (which hold it back in the picker's queues) instead of failing here;
//   - PreRequest counts the request in flight on the endpoint it was sent to and notes the time;
//   - ResponseBody takes the first response chunk as the first token (the request's TTFT as the engine
//     served it, without the client's network) and the last chunk as the request's end.
//
// L moves by additive increase, multiplicative decrease (AIMD) between minBatchSize and maxBatchSize, at most
// once per interval: a TTFT within the target while the engine's waiting queue (its own metric, as the picker
// scrapes it) is empty raises L by one; a TTFT over the target, or a non-empty queue, multiplies it by
// DecreaseFactor.
package adaptive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

const (
	// PluginType is the plugin's `type` in the EndpointPickerConfig.
	PluginType = "adaptive-batch-limit"

	// DecreaseFactor is the multiplicative decrease. Gentler than TCP's halving: TTFT grows smoothly with the
	// batch (no cliff like a dropped packet), and one long prompt gives a late first token whatever the batch,
	// so halving on it would throw away half an endpoint's throughput for a request the limit did not slow.
	// Repeated overshoots still bring L down fast: four intervals take it to a third.
	DecreaseFactor = 0.75

	// StaleAfter drops a request the picker never saw end (a client or engine gone mid-stream sends no last
	// chunk), so its slot is not held forever, and an endpoint no cycle offered for as long with nothing in
	// flight (a deleted pod), with its gauge. Longer than any answer the fleet serves.
	StaleAfter = 10 * time.Minute
)

// Limit is the current in-flight limit of each endpoint, on the picker's metrics endpoint.
var Limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "ascend_fleet_adaptive_batch_limit",
	Help: "In-flight requests the adaptive batch limit lets the picker send to the endpoint.",
}, []string{"endpoint"})

var registerOnce sync.Once

// Config is the plugin's parameters. IntervalMs, the least time between two changes of one endpoint's limit,
// defaults to the target: a change needs about one first token measured under the limit it set before the
// next one means anything.
type Config struct {
	MinBatchSize int     `json:"minBatchSize"`
	MaxBatchSize int     `json:"maxBatchSize"`
	TTFTTargetMs float64 `json:"ttftTargetMs"`
	IntervalMs   float64 `json:"intervalMs,omitempty"`
}

// endpointState is one endpoint's limit, its requests in flight, its last scraped queue, its last change and
// when a scheduling cycle last offered it.
type endpointState struct {
	limit    int
	inFlight int
	queue    int
	changed  time.Time
	seen     time.Time
}

// sent is one request in flight: where it went, when, and whether its first chunk came back.
type sent struct {
	endpoint string
	at       time.Time
	answered bool
}

// Limiter is the plugin: a scheduling filter and request-control hooks sharing one table of endpoints.
type Limiter struct {
	typedName plugin.TypedName
	config    Config
	target    time.Duration
	interval  time.Duration
	now       func() time.Time

	mu        sync.Mutex
	endpoints map[string]*endpointState
	requests  map[string]*sent
}

var (
	_ scheduling.Filter           = &Limiter{}
	_ requestcontrol.PreRequest   = &Limiter{}
	_ requestcontrol.ResponseBody = &Limiter{}
)

// Factory builds the plugin; bounds out of order or a target that is not positive are an error, so a
// misconfigured picker refuses to start.
func Factory(name string, raw json.RawMessage, _ plugin.Handle) (plugin.Plugin, error) {
	var config Config
	if len(raw) == 0 {
		return nil, errors.New("adaptive-batch-limit needs parameters: minBatchSize, maxBatchSize, ttftTargetMs")
	}
	if err := json.Unmarshal(raw, &config); err != nil {
		return nil, fmt.Errorf("adaptive-batch-limit parameters: %w", err)
	}
	limiter, err := New(name, config, time.Now)
	if err != nil {
		return nil, err
	}
	registerOnce.Do(func() { crmetrics.Registry.MustRegister(Limit) })
	return limiter, nil
}

// New is the plugin with a clock (tests pass their own).
func New(name string, config Config, now func() time.Time) (*Limiter, error) {
	if config.MinBatchSize < 1 || config.MaxBatchSize < config.MinBatchSize {
		return nil, fmt.Errorf("adaptive-batch-limit needs 1 <= minBatchSize <= maxBatchSize, got %d and %d",
			config.MinBatchSize, config.MaxBatchSize)
	}
	if config.TTFTTargetMs <= 0 || config.IntervalMs < 0 {
		return nil, fmt.Errorf("adaptive-batch-limit needs ttftTargetMs > 0 and intervalMs >= 0, got %g and %g",
			config.TTFTTargetMs, config.IntervalMs)
	}
	interval := config.IntervalMs
	if interval == 0 {
		interval = config.TTFTTargetMs
	}
	return &Limiter{
		typedName: plugin.TypedName{Type: PluginType, Name: name},
		config:    config,
		target:    time.Duration(config.TTFTTargetMs * float64(time.Millisecond)),
		interval:  time.Duration(interval * float64(time.Millisecond)),
		now:       now,
		endpoints: map[string]*endpointState{},
		requests:  map[string]*sent{},
	}, nil
}

// TypedName is the plugin's type and instance name.
func (l *Limiter) TypedName() plugin.TypedName {
	return l.typedName
}

// key names an endpoint the same way in the scheduling and the response hooks.
func key(meta *fwkdl.EndpointMetadata) string {
	if meta == nil {
		return ""
	}
	return meta.NamespacedName.String()
}

// state is the endpoint's entry, made at the upper bound: a new endpoint starts with the fixed limit.
func (l *Limiter) state(endpoint string) *endpointState {
	state, found := l.endpoints[endpoint]
	if !found {
		state = &endpointState{limit: l.config.MaxBatchSize, seen: l.now()}
		l.endpoints[endpoint] = state
		Limit.WithLabelValues(endpoint).Set(float64(state.limit))
	}
	return state
}

// Filter keeps the endpoints with fewer requests in flight than their limit, or all when none has (see the
// package comment). It also notes each endpoint's waiting queue for the next decision.
func (l *Limiter) Filter(_ context.Context, _ *scheduling.CycleState, _ *scheduling.LLMRequest, endpoints []scheduling.Endpoint) []scheduling.Endpoint {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropStale()
	kept := make([]scheduling.Endpoint, 0, len(endpoints))
	for _, endpoint := range endpoints {
		state := l.state(key(endpoint.GetMetadata()))
		state.seen = l.now()
		if metrics := endpoint.GetMetrics(); metrics != nil {
			state.queue = metrics.WaitingQueueSize
		}
		if state.inFlight < state.limit {
			kept = append(kept, endpoint)
		}
	}
	if len(kept) == 0 {
		return endpoints
	}
	return kept
}

// PreRequest counts the request in flight on the primary profile's first endpoint, where it is sent.
func (l *Limiter) PreRequest(_ context.Context, request *scheduling.LLMRequest, result *scheduling.SchedulingResult) {
	if request == nil || result == nil {
		return
	}
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil || len(primary.TargetEndpoints) == 0 {
		return
	}
	endpoint := key(primary.TargetEndpoints[0].GetMetadata())
	l.mu.Lock()
	defer l.mu.Unlock()
	if earlier, found := l.requests[request.RequestId]; found {
		l.state(earlier.endpoint).inFlight-- // scheduled again (a retry): count it once, where it goes now
	}
	l.state(endpoint).inFlight++
	l.requests[request.RequestId] = &sent{endpoint: endpoint, at: l.now()}
}

// ResponseBody measures the first token at the first chunk and ends the request at the last. When the
// gateway retried on a fallback endpoint, the request is moved to the endpoint that answered.
func (l *Limiter) ResponseBody(ctx context.Context, request *scheduling.LLMRequest, response *requestcontrol.Response, target *fwkdl.EndpointMetadata) {
	id := ""
	if request != nil {
		id = request.RequestId
	} else if response != nil {
		id = response.RequestId
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tracked, found := l.requests[id]
	if !found {
		return
	}
	if answered := key(target); answered != "" && answered != tracked.endpoint {
		l.state(tracked.endpoint).inFlight--
		l.state(answered).inFlight++
		tracked.endpoint = answered
	}
	if !tracked.answered {
		tracked.answered = true
		l.observe(ctx, tracked.endpoint, l.now().Sub(tracked.at))
	}
	if response == nil || response.EndOfStream {
		l.state(tracked.endpoint).inFlight--
		delete(l.requests, id)
	}
}

// observe is the AIMD step on one endpoint's first token.
func (l *Limiter) observe(ctx context.Context, endpoint string, ttft time.Duration) {
	state := l.state(endpoint)
	now := l.now()
	if !state.changed.IsZero() && now.Sub(state.changed) < l.interval {
		return
	}
	limit := state.limit
	if ttft > l.target || state.queue > 0 {
		limit = max(l.config.MinBatchSize, int(math.Floor(float64(limit)*DecreaseFactor)))
	} else {
		limit = min(l.config.MaxBatchSize, limit+1)
	}
	if limit == state.limit {
		return
	}
	log.FromContext(ctx).Info("adaptive batch limit", "endpoint", endpoint, "from", state.limit, "to", limit,
		"ttft", ttft, "queue", state.queue)
	state.limit, state.changed = limit, now
	Limit.WithLabelValues(endpoint).Set(float64(limit))
}

// dropStale forgets requests in flight for longer than StaleAfter, then endpoints gone as long; one that
// comes back starts again at the upper bound.
func (l *Limiter) dropStale() {
	now := l.now()
	for id, tracked := range l.requests {
		if now.Sub(tracked.at) > StaleAfter {
			l.state(tracked.endpoint).inFlight--
			delete(l.requests, id)
		}
	}
	for endpoint, state := range l.endpoints {
		if state.inFlight <= 0 && now.Sub(state.seen) > StaleAfter {
			delete(l.endpoints, endpoint)
			Limit.DeleteLabelValues(endpoint)
		}
	}
}

// LimitOf is an endpoint's current limit (the upper bound for one the plugin has not seen).
func (l *Limiter) LimitOf(endpoint string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state(endpoint).limit
}

// InFlight is the number of requests the plugin counts in flight on an endpoint.
func (l *Limiter) InFlight(endpoint string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state(endpoint).inFlight
}
