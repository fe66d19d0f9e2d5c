package otelsluice_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type email struct{ To string }

func (email) Kind() string { return "email" }

// env is one backend's store, a fake clock, and the integration over an
// in-memory span recorder and a manual metric reader.
type env struct {
	t      *testing.T
	store  *store.Store
	clock  *clock.Fake
	reg    *jobs.Registry
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	o      *otelsluice.Integration
	client *jobs.Client
}

func each(t *testing.T, cfg otelsluice.Config, fn func(t *testing.T, e *env)) {
	eachSampled(t, cfg, sdktrace.ParentBased(sdktrace.AlwaysSample()), fn)
}

// eachSampled is each with the tracer provider's sampler.
func eachSampled(t *testing.T, cfg otelsluice.Config, sampler sdktrace.Sampler, fn func(t *testing.T, e *env)) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sampler))
		reader := sdkmetric.NewManualReader()
		cfg.TracerProvider, cfg.MeterProvider = tp, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		o, err := otelsluice.New(cfg)
		require.NoError(t, err)
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		fn(t, &env{t: t, store: s, clock: c, reg: reg, spans: sr, tp: tp, reader: reader, o: o,
			client: jobs.NewClient(s, reg, o.InstrumentClient(jobs.ClientConfig{Clock: c}))})
	})
}

func (e *env) worker(cfg jobs.WorkerConfig) *jobs.Worker {
	e.t.Helper()
	cfg.Clock = e.clock
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := jobs.NewWorker(e.store, e.reg, e.o.InstrumentWorker(cfg))
	require.NoError(e.t, err)
	return w
}

func (e *env) drain(cfg jobs.WorkerConfig) jobs.DrainResult {
	e.t.Helper()
	res, err := e.worker(cfg).Drain(context.Background())
	require.NoError(e.t, err)
	return res
}

// span returns the one ended span named name.
func (e *env) span(name string) sdktrace.ReadOnlySpan {
	e.t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	require.Len(e.t, found, 1, "spans named %q", name)
	return found[0]
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func events(s sdktrace.ReadOnlySpan) map[string]map[attribute.Key]attribute.Value {
	out := map[string]map[attribute.Key]attribute.Value{}
	for _, ev := range s.Events() {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range ev.Attributes {
			m[kv.Key] = kv.Value
		}
		out[ev.Name] = m
	}
	return out
}

// A trace started before Enqueue (the HTTP request's) continues into the
// handler's context: with ChildOf, the run's span is the enqueue's child
// in the request's trace.
func TestATraceStartedBeforeEnqueueContinuesIntoTheHandler(t *testing.T) {
	each(t, otelsluice.Config{ChildOf: true}, func(t *testing.T, e *env) {
		var handlerSpan trace.SpanContext
		var logged bytes.Buffer
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			handlerSpan = trace.SpanContextFromContext(ctx)
			jobs.Logger(ctx).Info("sending")
			return nil
		}))
		ctx, request := e.tp.Tracer("http").Start(context.Background(), "GET /signup")
		res, err := e.client.Enqueue(ctx, email{To: "a@example.com"})
		require.NoError(t, err)
		request.End()
		md, err := engine.DecodeMetadata(jobInfo(t, e, res.ID).Metadata)
		require.NoError(t, err)
		require.Contains(t, md, "traceparent", "the enqueue's trace context is stored with the job")

		require.Equal(t, 1, e.drain(jobs.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&logged, nil))}).Completed)
		req, enq, run := e.span("GET /signup"), e.span("enqueue default"), e.span("process default")
		traceID := req.SpanContext().TraceID()
		require.Equal(t, traceID, enq.SpanContext().TraceID())
		require.Equal(t, req.SpanContext().SpanID(), enq.Parent().SpanID())
		require.Equal(t, trace.SpanKindProducer, enq.SpanKind())
		require.Equal(t, traceID, run.SpanContext().TraceID(), "one trace joins the request and the job")
		require.Equal(t, enq.SpanContext().SpanID(), run.Parent().SpanID())
		require.Equal(t, trace.SpanKindConsumer, run.SpanKind())
		require.Equal(t, run.SpanContext().SpanID(), handlerSpan.SpanID(), "the handler's context holds the run's span")
		require.Equal(t, traceID, handlerSpan.TraceID())

		a := attrs(enq)
		require.Equal(t, "sluice", a["messaging.system"].AsString())
		require.Equal(t, "send", a["messaging.operation.type"].AsString())
		require.Equal(t, "default", a["messaging.destination.name"].AsString())
		require.Equal(t, "email", a["sluice.kind"].AsString())
		require.Equal(t, jobID(res.ID), a["messaging.message.id"].AsString())
		a = attrs(run)
		require.Equal(t, "sluice", a["messaging.system"].AsString())
		require.Equal(t, "process", a["messaging.operation.name"].AsString())
		require.Equal(t, "default", a["messaging.destination.name"].AsString())
		require.Equal(t, jobID(res.ID), a["messaging.message.id"].AsString())
		require.Equal(t, int64(1), a["sluice.attempt"].AsInt64())
		require.Equal(t, int64(0), a["sluice.priority"].AsInt64())
		require.NotContains(t, a, otelsluice.OutcomeKey, "a completed run has no outcome attribute")
		require.NotContains(t, a, otelsluice.DeferralsKey, "nor deferrals, when it was not deferred")
		require.Equal(t, codes.Unset, run.Status().Code)

		require.Contains(t, logged.String(), "trace_id="+traceID.String(), "the run's logger carries the trace")
		require.Contains(t, logged.String(), "span_id="+run.SpanContext().SpanID().String())
		require.Contains(t, logged.String(), "job_id="+jobID(res.ID))
	})
}

// By default the run's span starts a trace of its own, linked to the
// enqueue's.
func TestTheRunsSpanIsLinkedToTheEnqueueByDefault(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[email]) error { return nil }))
		ctx, request := e.tp.Tracer("http").Start(context.Background(), "POST /batch")
		_, err := e.client.EnqueueMany(ctx, []jobs.Item{{Args: email{To: "a"}}, {Args: email{To: "b"}, Options: []jobs.EnqueueOption{jobs.Queue("other")}}})
		require.NoError(t, err)
		request.End()
		e.drain(jobs.WorkerConfig{Queues: []string{"default", "other"}})
		enq := e.span("enqueue")
		require.Equal(t, int64(2), attrs(enq)["messaging.batch.message_count"].AsInt64(), "one span for the batch")
		for _, name := range []string{"process default", "process other"} {
			run := e.span(name)
			require.NotEqual(t, enq.SpanContext().TraceID(), run.SpanContext().TraceID())
			require.False(t, run.Parent().IsValid(), "a root span")
			require.Len(t, run.Links(), 1)
			require.Equal(t, enq.SpanContext().SpanID(), run.Links()[0].SpanContext.SpanID())
			require.Equal(t, enq.SpanContext().TraceID(), run.Links()[0].SpanContext.TraceID())
		}
	})
}

// A trace state travels from the enqueue to every job of a batch as the
// trace ids do, through a propagator other than the default (which also
// writes baggage into the metadata), and the baggage is back in the run's
// context.
func TestTraceStateTravelsWithTheJobsThroughAnyPropagator(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	each(t, otelsluice.Config{Propagator: prop, ChildOf: true}, func(t *testing.T, e *env) {
		seen := make(chan trace.SpanContext, 2)
		bags, tenants := make(chan string, 2), make(chan string, 2)
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			bags <- j.Metadata["baggage"]
			tenants <- baggage.FromContext(ctx).Member("tenant").Value()
			seen <- trace.SpanContextFromContext(ctx)
			return nil
		}))
		state, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		member, err := baggage.NewMember("tenant", "acme")
		require.NoError(t, err)
		bag, err := baggage.New(member)
		require.NoError(t, err)
		remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
			TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
		ctx := baggage.ContextWithBaggage(trace.ContextWithRemoteSpanContext(context.Background(), remote), bag)
		_, err = e.client.EnqueueMany(ctx, []jobs.Item{{Args: email{To: "a"}}, {Args: email{To: "b"}}})
		require.NoError(t, err)
		e.drain(jobs.WorkerConfig{})
		for range 2 {
			sc := <-seen
			require.Equal(t, remote.TraceID(), sc.TraceID())
			require.Equal(t, "vendor=abc", sc.TraceState().String())
			require.Equal(t, "tenant=acme", <-bags)
			require.Equal(t, "acme", <-tenants, "the handler's context has the baggage")
		}
	})
}

// A rate-limited job's span carries its deferrals, the reason, and the time
// it waited; the deferral counter counts it by limit, never by budget key
// unless asked.
func TestARateLimitedJobsSpanCarriesItsDeferrals(t *testing.T) {
	for _, byKey := range []bool{false, true} {
		t.Run(map[bool]string{false: "by limit", true: "by key"}[byKey], func(t *testing.T) {
			each(t, otelsluice.Config{BudgetKeyAttribute: byKey}, func(t *testing.T, e *env) {
				require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[email]) error { return nil },
					jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Burst: 1, Key: func(m email) any { return m.To }})))
				first, err := e.client.Enqueue(context.Background(), email{To: "acct-1"})
				require.NoError(t, err)
				second, err := e.client.Enqueue(context.Background(), email{To: "acct-1"})
				require.NoError(t, err)
				require.Equal(t, 1, e.drain(jobs.WorkerConfig{}).Deferred)
				e.clock.Advance(2 * time.Second)
				require.Equal(t, 1, e.drain(jobs.WorkerConfig{}).Completed)

				var runs []sdktrace.ReadOnlySpan
				for _, s := range e.spans.Ended() {
					if s.Name() == "process default" {
						runs = append(runs, s)
					}
				}
				require.Len(t, runs, 2)
				byID := map[string]sdktrace.ReadOnlySpan{}
				for _, r := range runs {
					byID[attrs(r)["messaging.message.id"].AsString()] = r
				}
				a := attrs(byID[jobID(first.ID)])
				require.NotContains(t, a, otelsluice.DeferralsKey)
				require.NotContains(t, events(byID[jobID(first.ID)]), otelsluice.EventDeferred)

				run := byID[jobID(second.ID)]
				a = attrs(run)
				require.Equal(t, int64(1), a["sluice.deferrals"].AsInt64())
				require.Equal(t, 2.0, a["sluice.limit_wait"].AsFloat64())
				require.Equal(t, "rate limit email/acct-1", a["sluice.deferral_reason"].AsString())
				require.Equal(t, []string{"email/acct-1"}, a["sluice.budgets"].AsStringSlice())
				ev := events(run)[otelsluice.EventDeferred]
				require.NotNil(t, ev)
				require.Equal(t, "rate limit email/acct-1", ev["sluice.reason"].AsString())
				require.Equal(t, t0.Format(time.RFC3339Nano), ev["sluice.deferred_at"].AsString())

				m := collect(t, e)
				deferred := sum(t, m, "sluice.jobs.deferred")
				require.Len(t, deferred.DataPoints, 1)
				dp := deferred.DataPoints[0]
				require.Equal(t, int64(1), dp.Value)
				limit, _ := dp.Attributes.Value("sluice.limit")
				require.Equal(t, "email", limit.AsString())
				key, hasKey := dp.Attributes.Value("sluice.budget")
				require.Equal(t, byKey, hasKey, "the budget key only when asked")
				if byKey {
					require.Equal(t, "email/acct-1", key.AsString())
				}
				lat := histogram(t, m, "sluice.job.latency")
				require.Len(t, lat.DataPoints, 1)
				require.Equal(t, uint64(2), lat.DataPoints[0].Count)
				require.Equal(t, 2.0, lat.DataPoints[0].Sum, "0 s for the first, 2 s for the one that waited")
			})
		})
	}
}

// Errors set the span's status; a snooze, an upstream's 429 and a
// cancellation are events; the finished counter and the duration
// histogram count each run by outcome.
func TestOutcomesOnSpansAndMetrics(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		outcomes := map[string]error{
			"fail":   errors.New("smtp: 550 mailbox unavailable"),
			"snooze": jobs.Snooze(time.Minute),
			"429":    jobs.RetryAfter(30 * time.Second),
			"cancel": jobs.Cancel(errors.New("unsubscribed")),
			"ok":     nil,
		}
		require.NoError(t, jobs.Register(e.reg, func(_ context.Context, j *jobs.Job[email]) error { return outcomes[j.Args.To] }))
		ids := map[string]string{}
		for to := range outcomes {
			res, err := e.client.Enqueue(context.Background(), email{To: to})
			require.NoError(t, err)
			ids[jobID(res.ID)] = to
		}
		e.drain(jobs.WorkerConfig{})
		seen := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range e.spans.Ended() {
			if s.Name() == "process default" {
				seen[ids[attrs(s)["messaging.message.id"].AsString()]] = s
			}
		}
		require.Len(t, seen, len(outcomes))
		require.Equal(t, codes.Error, seen["fail"].Status().Code)
		require.Equal(t, "smtp: 550 mailbox unavailable", seen["fail"].Status().Description)
		require.Equal(t, "*errors.errorString", attrs(seen["fail"])["error.type"].AsString())
		require.Equal(t, "retried", attrs(seen["fail"])["sluice.outcome"].AsString())
		require.Contains(t, events(seen["fail"]), "exception")
		require.Equal(t, 60.0, events(seen["snooze"])[otelsluice.EventSnoozed]["sluice.wait"].AsFloat64())
		require.Equal(t, 30.0, events(seen["429"])[otelsluice.EventRetryAfter]["sluice.wait"].AsFloat64())
		require.Equal(t, "unsubscribed", events(seen["cancel"])[otelsluice.EventCancelled]["sluice.reason"].AsString())
		for _, to := range []string{"snooze", "429", "cancel", "ok"} {
			require.Equal(t, codes.Unset, seen[to].Status().Code, to)
		}

		m := collect(t, e)
		got := map[string]int64{}
		for _, dp := range sum(t, m, "sluice.jobs.finished").DataPoints {
			o, _ := dp.Attributes.Value("sluice.outcome")
			k, _ := dp.Attributes.Value("sluice.kind")
			q, _ := dp.Attributes.Value("messaging.destination.name")
			require.Equal(t, "email", k.AsString())
			require.Equal(t, "default", q.AsString())
			got[o.AsString()] += dp.Value
		}
		require.Equal(t, map[string]int64{"retried": 1, "snoozed": 1, "throttled": 1, "cancelled": 1, "completed": 1}, got)
		var runs uint64
		for _, dp := range histogram(t, m, "sluice.job.duration").DataPoints {
			runs += dp.Count
		}
		require.Equal(t, uint64(5), runs)
	})
}

// A job still running when shutdown releases it has its span ended, as
// does one that returns when cancelled: no span is left open.
func TestNoSpanLeaksWhenAJobIsReleasedOnShutdown(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan string, 2)
		unblock := make(chan struct{})
		defer close(unblock)
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			started <- j.Args.To
			if j.Args.To == "cooperative" {
				<-ctx.Done()
				return ctx.Err()
			}
			<-unblock
			return nil
		}))
		for _, to := range []string{"cooperative", "stubborn"} {
			_, err := e.client.Enqueue(context.Background(), email{To: to})
			require.NoError(t, err)
		}
		finished := make(chan jobs.FinishEvent, 2)
		w := e.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, JobTimeout: -1,
			Hooks: jobs.Hooks{OnFinish: func(ev jobs.FinishEvent) { finished <- ev }}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		for range 2 {
			<-started
		}
		go func() {
			<-e.clock.WaitForTimerAt(t0.Add(30 * time.Second))
			e.clock.Advance(30 * time.Second)
			<-e.clock.WaitForTimerAt(t0.Add(31 * time.Second))
			<-finished // the cooperative job returned within the grace
			e.clock.Advance(time.Second)
		}()
		cancel()
		require.NoError(t, <-done)

		var runs []sdktrace.ReadOnlySpan
		for _, s := range e.spans.Ended() {
			if s.Name() == "process default" {
				runs = append(runs, s)
			}
		}
		require.Len(t, e.spans.Started(), len(e.spans.Ended()), "every span that started has ended")
		require.Len(t, runs, 2)
		for _, r := range runs {
			require.Equal(t, "released", attrs(r)["sluice.outcome"].AsString())
			require.Contains(t, events(r), otelsluice.EventReleased)
		}
	})
}

// With the integration off nothing is written to a job's metadata, and no
// span is made.
func TestWithoutTheIntegrationNothingIsRecorded(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[email]) error { return nil }))
		plain := jobs.NewClient(e.store, e.reg, jobs.ClientConfig{Clock: e.clock})
		res, err := plain.Enqueue(context.Background(), email{To: "a"})
		require.NoError(t, err)
		require.Empty(t, jobInfo(t, e, res.ID).Metadata)
		w, err := jobs.NewWorker(e.store, e.reg, jobs.WorkerConfig{Clock: e.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.NoError(t, err)
		require.Empty(t, e.spans.Started())
	})
}

// A job whose enqueue was sampled out carries no trace context when its
// run would only link to it: nothing recorded the span the link would
// name. With ChildOf it does, and the run follows the enqueue's decision
// (a parent-based sampler records no run span); another propagator's
// entries (baggage) are kept too.
func TestASampledOutEnqueueCarriesItsContextOnlyWhereItIsRead(t *testing.T) {
	never := sdktrace.ParentBased(sdktrace.NeverSample())
	withBaggage := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	for _, c := range []struct {
		name    string
		cfg     otelsluice.Config
		carried bool
	}{
		{"link", otelsluice.Config{}, false},
		{"child", otelsluice.Config{ChildOf: true}, true},
		{"link with baggage", otelsluice.Config{Propagator: withBaggage}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachSampled(t, c.cfg, never, func(t *testing.T, e *env) {
				var seen trace.SpanContext
				require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
					seen = trace.SpanContextFromContext(ctx)
					return nil
				}))
				res, err := e.client.Enqueue(context.Background(), email{To: "a"})
				require.NoError(t, err)
				md, err := engine.DecodeMetadata(jobInfo(t, e, res.ID).Metadata)
				require.NoError(t, err)
				if !c.carried {
					require.Empty(t, md, "a link to a span nobody recorded is not stored")
				} else {
					require.Contains(t, md, "traceparent")
					require.True(t, strings.HasSuffix(md["traceparent"], "-00"), "the sampled-out flag travels: %q", md["traceparent"])
				}
				require.Equal(t, 1, e.drain(jobs.WorkerConfig{}).Completed)
				require.Empty(t, e.spans.Ended(), "no span recorded, at enqueue or run")
				require.True(t, seen.IsValid(), "the run still has a span context for the handler's own spans")
				require.False(t, seen.IsSampled())
				if c.cfg.ChildOf {
					require.Equal(t, md["traceparent"][3:35], seen.TraceID().String(), "the run is in the enqueue's trace")
				}
			})
		})
	}
}

func jobInfo(t *testing.T, e *env, id int64) *engine.JobInfo {
	t.Helper()
	j, err := engine.From(e.store).GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

func jobID(id int64) string { return strconv.FormatInt(id, 10) }

func collect(t *testing.T, e *env) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, e.reader.Collect(context.Background(), &rm))
	return rm
}

func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Aggregation {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func sum(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Sum[int64] {
	t.Helper()
	s, ok := find(t, rm, name).(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 sum", name)
	return s
}

func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Histogram[float64] {
	t.Helper()
	h, ok := find(t, rm, name).(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a float64 histogram", name)
	return h
}

// Workers running many jobs at once each trace every run once, in the
// trace of the enqueue that made it, and record every run in the metrics.
func TestConcurrentWorkersTraceEveryRunOnce(t *testing.T) {
	each(t, otelsluice.Config{ChildOf: true}, func(t *testing.T, e *env) {
		const n = 120
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			jobs.Logger(ctx).Debug("run")
			return nil
		}))
		items := make([]jobs.Item, n)
		for i := range items {
			items[i] = jobs.Item{Args: email{To: strconv.Itoa(i)}}
		}
		_, err := e.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		finished := make(chan jobs.FinishEvent, n)
		ctx, cancel := context.WithCancel(context.Background())
		var done []chan error
		for range 3 {
			w, err := jobs.NewWorker(e.store, e.reg, e.o.InstrumentWorker(jobs.WorkerConfig{
				Concurrency: 8, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Hooks: jobs.Hooks{OnFinish: func(ev jobs.FinishEvent) { finished <- ev }},
			}))
			require.NoError(t, err)
			ch := make(chan error, 1)
			go func() { ch <- w.Run(ctx) }()
			done = append(done, ch)
		}
		for range n {
			select {
			case <-finished:
			case <-time.After(30 * time.Second):
				t.Fatal("the jobs did not all run")
			}
		}
		cancel()
		for _, ch := range done {
			require.NoError(t, <-ch)
		}
		enq := e.span("enqueue default")
		seen := map[string]bool{}
		for _, s := range e.spans.Ended() {
			if s.Name() != "process default" {
				continue
			}
			id := attrs(s)["messaging.message.id"].AsString()
			require.False(t, seen[id], "job %s traced once", id)
			seen[id] = true
			require.Equal(t, enq.SpanContext().TraceID(), s.SpanContext().TraceID())
		}
		require.Len(t, seen, n)
		require.Len(t, e.spans.Started(), len(e.spans.Ended()))
		var runs int64
		for _, dp := range sum(t, collect(t, e), "sluice.jobs.finished").DataPoints {
			runs += dp.Value
		}
		require.Equal(t, int64(n), runs)
	})
}
