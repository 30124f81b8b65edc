package adaptive

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// clock is a settable time for the limiter.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func meta(pod string) *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: pod}, PodName: pod}
}

func endpoint(pod string, queue int) scheduling.Endpoint {
	return scheduling.NewEndpoint(meta(pod), &fwkdl.Metrics{WaitingQueueSize: queue}, nil)
}

func build(t *testing.T, config Config) (*Limiter, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1000, 0)}
	limiter, err := New("adaptive", config, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return limiter, c
}

func pods(endpoints []scheduling.Endpoint) []string {
	names := []string{}
	for _, e := range endpoints {
		names = append(names, e.GetMetadata().PodName)
	}
	return names
}

// send schedules request id to pod (PreRequest as the director calls it).
func send(l *Limiter, id, pod string) *scheduling.LLMRequest {
	request := &scheduling.LLMRequest{RequestId: id}
	result := &scheduling.SchedulingResult{
		PrimaryProfileName: "default",
		ProfileResults: map[string]*scheduling.ProfileRunResult{
			"default": {TargetEndpoints: []scheduling.Endpoint{endpoint(pod, 0)}},
		},
	}
	l.PreRequest(context.Background(), request, result)
	return request
}

func chunk(l *Limiter, request *scheduling.LLMRequest, pod string, last bool) {
	l.ResponseBody(context.Background(), request, &requestcontrol.Response{RequestId: request.RequestId, EndOfStream: last}, meta(pod))
}

const r0 = "ns/r0"

func TestFactoryRefusesBadBounds(t *testing.T) {
	for _, raw := range []string{``, `{"minBatchSize":0,"maxBatchSize":4,"ttftTargetMs":500}`,
		`{"minBatchSize":5,"maxBatchSize":4,"ttftTargetMs":500}`, `{"minBatchSize":1,"maxBatchSize":4}`, `{"minBatchSize":`} {
		if _, err := Factory("adaptive", json.RawMessage(raw), nil); err == nil {
			t.Errorf("parameters %q: want an error", raw)
		}
	}
	built, err := Factory("adaptive", json.RawMessage(`{"minBatchSize":1,"maxBatchSize":4,"ttftTargetMs":500}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := built.(*Limiter).interval; got != 500*time.Millisecond {
		t.Errorf("interval defaults to the target: got %v", got)
	}
}

func TestFilterPassesOverFullEndpointsAndKeepsAllWhenEveryOneIsFull(t *testing.T) {
	l, _ := build(t, Config{MinBatchSize: 1, MaxBatchSize: 2, TTFTTargetMs: 500})
	pool := []scheduling.Endpoint{endpoint("r0", 0), endpoint("r1", 0)}
	send(l, "a", "r0")
	if got := pods(l.Filter(context.Background(), nil, nil, pool)); len(got) != 2 {
		t.Fatalf("one of two slots used: want both, got %v", got)
	}
	send(l, "b", "r0")
	if got := pods(l.Filter(context.Background(), nil, nil, pool)); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("r0 at its limit: want [r1], got %v", got)
	}
	send(l, "c", "r1")
	send(l, "d", "r1")
	if got := pods(l.Filter(context.Background(), nil, nil, pool)); len(got) != 2 {
		t.Fatalf("every endpoint full: want all kept, got %v", got)
	}
}

func TestAdditiveIncreaseAndMultiplicativeDecreaseOncePerInterval(t *testing.T) {
	l, c := build(t, Config{MinBatchSize: 2, MaxBatchSize: 8, TTFTTargetMs: 500})
	pool := []scheduling.Endpoint{endpoint("r0", 0)}
	l.Filter(context.Background(), nil, nil, pool)
	// A slow first token: 8 -> floor(8 * 0.75) = 6.
	slow := send(l, "slow", "r0")
	c.advance(900 * time.Millisecond)
	chunk(l, slow, "r0", false)
	if got := l.LimitOf(r0); got != 6 {
		t.Fatalf("after a TTFT over the target: want 6, got %d", got)
	}
	// Another slow one within the interval changes nothing.
	again := send(l, "again", "r0")
	c.advance(100 * time.Millisecond)
	chunk(l, again, "r0", true)
	if got := l.LimitOf(r0); got != 6 {
		t.Fatalf("within the interval: want 6, got %d", got)
	}
	// Fast first tokens with an empty queue, one per interval: +1 each, up to the upper bound.
	for want := 7; want <= 9; want++ {
		c.advance(time.Second)
		fast := send(l, "fast", "r0")
		c.advance(100 * time.Millisecond)
		chunk(l, fast, "r0", true)
		if got := l.LimitOf(r0); got != min(want, 8) {
			t.Fatalf("after a fast TTFT: want %d, got %d", min(want, 8), got)
		}
	}
	if got := testutil.ToFloat64(Limit.WithLabelValues(r0)); got != 8 {
		t.Errorf("gauge: want 8, got %g", got)
	}
	// A fast first token while the engine has requests waiting still decreases, down to the lower bound.
	l.Filter(context.Background(), nil, nil, []scheduling.Endpoint{endpoint("r0", 3)})
	for _, want := range []int{6, 4, 3, 2, 2} {
		c.advance(time.Second)
		fast := send(l, "queued", "r0")
		chunk(l, fast, "r0", true)
		if got := l.LimitOf(r0); got != want {
			t.Fatalf("queue not empty: want %d, got %d", want, got)
		}
	}
}

func TestInFlightEndsAtTheLastChunkFollowsRetriesAndExpires(t *testing.T) {
	l, c := build(t, Config{MinBatchSize: 1, MaxBatchSize: 4, TTFTTargetMs: 500})
	a := send(l, "a", "r0")
	chunk(l, a, "r0", false)
	if got := l.InFlight(r0); got != 1 {
		t.Fatalf("after the first chunk: want 1 in flight, got %d", got)
	}
	chunk(l, a, "r0", true)
	if got := l.InFlight(r0); got != 0 {
		t.Fatalf("after the last chunk: want 0 in flight, got %d", got)
	}
	b := send(l, "b", "r0")
	chunk(l, b, "r1", false) // the gateway retried on the fallback r1
	if l.InFlight(r0) != 0 || l.InFlight("ns/r1") != 1 {
		t.Fatalf("retried: want 0 on r0 and 1 on r1, got %d and %d", l.InFlight(r0), l.InFlight("ns/r1"))
	}
	send(l, "lost", "r0") // never answered
	c.advance(StaleAfter + time.Second)
	l.Filter(context.Background(), nil, nil, []scheduling.Endpoint{endpoint("r0", 0)})
	if got := l.InFlight(r0); got != 0 {
		t.Fatalf("a request older than StaleAfter: want it dropped, got %d in flight", got)
	}
}

func TestAnEndpointGoneForLongIsForgottenWithItsGauge(t *testing.T) {
	Limit.Reset() // the gauge is the package's: other tests' endpoints out of the count
	l, c := build(t, Config{MinBatchSize: 1, MaxBatchSize: 4, TTFTTargetMs: 500})
	l.Filter(context.Background(), nil, nil, []scheduling.Endpoint{endpoint("gone", 2), endpoint("r0", 0)})
	late := send(l, "late", "gone")
	c.advance(time.Second)
	chunk(l, late, "gone", true)
	if got := testutil.ToFloat64(Limit.WithLabelValues("ns/gone")); got != 3 {
		t.Fatalf("gauge after a decrease: want 3, got %g", got)
	}
	c.advance(StaleAfter / 2)
	l.Filter(context.Background(), nil, nil, []scheduling.Endpoint{endpoint("r0", 0)})
	if got := l.LimitOf("ns/gone"); got != 3 {
		t.Fatalf("offered within StaleAfter: want the limit kept at 3, got %d", got)
	}
	c.advance(StaleAfter)
	l.Filter(context.Background(), nil, nil, []scheduling.Endpoint{endpoint("r0", 0)})
	if got := testutil.CollectAndCount(Limit, "ascend_fleet_adaptive_batch_limit"); got != 1 {
		t.Errorf("gauge series after the pod is gone: want only r0's, got %d", got)
	}
	if got := l.LimitOf("ns/gone"); got != 4 {
		t.Errorf("a forgotten endpoint starts again at the upper bound: want 4, got %d", got)
	}
}
