// Package otelsluice traces and measures sluice jobs with OpenTelemetry:
// an enqueue makes a producer span and stores its W3C trace context in
// each job's metadata; the run makes a consumer span linked to it (or,
// with ChildOf, its child), so a trace backend shows the request that
// enqueued a job beside the run that did it, with the time the job spent
// waiting on rate limits. Metrics go through the OpenTelemetry meter.
//
// It is built on package jobs' middleware and hooks, and nothing in
// sluice depends on it: a program that does not import it pays nothing.
//
//	o, err := otelsluice.New(otelsluice.Config{})
//	client := jobs.NewClient(store, reg, o.InstrumentClient(jobs.ClientConfig{}))
//	worker, err := jobs.NewWorker(store, reg, o.InstrumentWorker(jobs.WorkerConfig{}))
package otelsluice

import (
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/jobs"
)

// ScopeName is the instrumentation scope of sluice's tracer and meter.
const ScopeName = "github.com/sluicequeue/sluice/otelsluice"

// System is the messaging.system of every span and metric.
const System = "sluice"

// Attribute keys sluice adds to the messaging conventions' own.
const (
	KindKey     = attribute.Key("sluice.kind")
	AttemptKey  = attribute.Key("sluice.attempt")
	PriorityKey = attribute.Key("sluice.priority")
	// BudgetsKey lists the rate-limit budgets a run drew on; absent when
	// none limits the job.
	BudgetsKey        = attribute.Key("sluice.budgets")
	ConcurrencyKeyKey = attribute.Key("sluice.concurrency_key")
	// DeferralsKey counts the times a rate limit deferred the job (a
	// claim, or a worker's sweep of a flood), over its life; absent (with DeferralReasonKey and
	// LimitWaitKey) when it never was.
	DeferralsKey      = attribute.Key("sluice.deferrals")
	DeferralReasonKey = attribute.Key("sluice.deferral_reason")
	// LimitWaitKey is the time the job waited on rate limits before its
	// run, in seconds.
	LimitWaitKey = attribute.Key("sluice.limit_wait")
	// OutcomeKey is what became of a run that did not complete: retried,
	// failed, snoozed, throttled, cancelled, released or panicked. A
	// completed run has none (and its status is Unset).
	OutcomeKey = attribute.Key("sluice.outcome")
	// WaitKey is how long a snoozed or throttled job waits, in seconds.
	WaitKey   = attribute.Key("sluice.wait")
	ReasonKey = attribute.Key("sluice.reason")
	JoinedKey = attribute.Key("sluice.joined")
	// LimitKey is the limit that deferred jobs: its group, or the kind,
	// or "@queue".
	LimitKey  = attribute.Key("sluice.limit")
	BudgetKey = attribute.Key("sluice.budget")
	ShadowKey = attribute.Key("sluice.shadow")
	// DeferredAtKey is when the job's wait on rate limits began (RFC 3339).
	DeferredAtKey = attribute.Key("sluice.deferred_at")
)

// Span event names.
const (
	EventDeferred   = "sluice.deferred"
	EventSnoozed    = "sluice.snoozed"
	EventRetryAfter = "sluice.retry_after"
	EventCancelled  = "sluice.cancelled"
	EventReleased   = "sluice.released"
)

// Config configures the integration. The zero value uses the global
// providers and W3C trace context.
type Config struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes an enqueue's trace context into each job's
	// metadata and reads it back at the run. Defaults to
	// propagation.TraceContext{} (the W3C traceparent and tracestate
	// entries). A propagator that also carries baggage
	// (propagation.Baggage{} in a composite) puts the enqueue's baggage in
	// the run's context, where baggage.FromContext finds it in the
	// handler; it makes the metadata bigger, and metadata is capped at
	// 8 KiB.
	Propagator propagation.TextMapPropagator
	// ChildOf makes a run's span a child of its enqueue's span, in the
	// enqueue's trace. Defaults to false: the run's span starts a trace of
	// its own, linked to the enqueue's, as the messaging conventions
	// advise for work that may run long after the request ended (retries
	// and rate-limit waits included).
	ChildOf bool
	// BudgetKeyAttribute adds the budget key (sluice.budget) to the
	// deferral counter: one series per key, which may be one per
	// customer. Defaults to false: the limit (its group, or the kind) only.
	BudgetKeyAttribute bool
}

// Integration makes sluice's spans and metrics. Create it with New; it is
// safe for concurrent use.
type Integration struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// defaultProp is set when prop is W3C trace context (the default):
	// the run reads a traceparent itself (see producer).
	defaultProp bool

	finished metric.Int64ObservableCounter
	duration metric.Float64Histogram
	latency  metric.Float64Histogram
	deferred metric.Int64Counter
	// series holds a *series per queue and kind seen (see seriesOf); it
	// is replaced, under seriesMu, to add one.
	series   atomic.Pointer[map[seriesKey]*series]
	seriesMu sync.Mutex
}

// New returns an integration with cfg, or an error when the meter refuses
// an instrument.
func New(cfg Config) (*Integration, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	_, defaultProp := cfg.Propagator.(propagation.TraceContext)
	o := &Integration{cfg: cfg, prop: cfg.Propagator, defaultProp: defaultProp,
		tracer: cfg.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
	o.series.Store(&map[seriesKey]*series{})
	m := cfg.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var errs [4]error
	o.finished, errs[0] = m.Int64ObservableCounter("sluice.jobs.finished", metric.WithUnit("{job}"),
		metric.WithDescription("Runs that ended, by queue, kind and outcome (completed, retried, failed, cancelled, snoozed, throttled, released)."),
		metric.WithInt64Callback(o.observeFinished))
	o.duration, errs[1] = m.Float64Histogram("sluice.job.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a run's handler took, by queue, kind and outcome."))
	o.latency, errs[2] = m.Float64Histogram("sluice.job.latency", metric.WithUnit("s"),
		metric.WithDescription("From enqueue to the claim that started the run, by queue and kind: rate-limit waits, delays and retries' backoff included."))
	o.deferred, errs[3] = m.Int64Counter("sluice.jobs.deferred", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs a rate limit deferred, by a claim or by a worker's sweep of a flood, by kind and limit (its group, or the kind); shadow mode's would-be deferrals carry sluice.shadow."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return o, nil
}

// InstrumentClient returns cfg with the integration's enqueue middleware
// added outermost.
func (o *Integration) InstrumentClient(cfg jobs.ClientConfig) jobs.ClientConfig {
	cfg.Middleware = append([]jobs.EnqueueMiddleware{o.EnqueueMiddleware()}, cfg.Middleware...)
	return cfg
}

// InstrumentWorker returns cfg with the integration's middleware added
// outermost (so that the other middleware runs inside its span) and its
// hooks joined to cfg's.
func (o *Integration) InstrumentWorker(cfg jobs.WorkerConfig) jobs.WorkerConfig {
	cfg.Middleware = append([]jobs.Middleware{o.Middleware()}, cfg.Middleware...)
	cfg.Hooks = cfg.Hooks.Join(o.Hooks())
	return cfg
}
