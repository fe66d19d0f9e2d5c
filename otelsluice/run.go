package otelsluice

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/jobs"
)

// Middleware returns the worker middleware: a consumer span per run,
// named "process" and the queue, linked to (with ChildOf, a child of) the
// enqueue's span found in the job's metadata, carrying the job's
// attributes, its deferrals and the time it waited on limits; the run's
// logger (jobs.Logger) gains the trace_id and span_id. The span's status is
// an error when the run failed; a snooze, an upstream's RetryAfter, a
// cancellation and a release at shutdown are events. A job the worker
// releases while it still runs gets its span ended there. Baggage the
// propagator wrote at the enqueue is in the run's context.
func (o *Integration) Middleware() jobs.Middleware {
	return func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) (err error) {
		s := o.seriesOf(job.Queue, job.Kind)
		if !job.ClaimedAt.IsZero() && !job.EnqueuedAt.IsZero() {
			o.latency.Record(ctx, max(job.ClaimedAt.Sub(job.EnqueuedAt), 0).Seconds(), s.latency...)
		}
		opts := consumer
		producer, bag := o.producer(job.Metadata)
		if bag.Len() > 0 {
			ctx = baggage.ContextWithBaggage(ctx, bag)
		}
		if producer.IsValid() {
			if o.cfg.ChildOf {
				ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
			} else {
				opts = []trace.SpanStartOption{consumer[0], newRoot, trace.WithLinks(trace.Link{SpanContext: producer})}
			}
		}
		ctx, span := o.tracer.Start(ctx, s.spanName, opts...)
		if span.SpanContext().IsValid() {
			jobs.AddLogAttrs(ctx, func() []slog.Attr { return logAttrs(span.SpanContext()) })
		}
		if !span.IsRecording() {
			// A span sampled out records nothing: it gets no attributes,
			// and has nothing to end if the worker releases the job.
			defer span.End()
			return next(ctx)
		}
		setRunAttrs(span, s, job)
		if job.Deferrals > 0 {
			span.AddEvent(EventDeferred, trace.WithAttributes(
				DeferralsKey.Int(job.Deferrals), ReasonKey.String(job.DeferralReason),
				LimitWaitKey.Float64(job.LimitWait.Seconds()), DeferredAtKey.String(timeText(job.DeferredAt))))
		}
		r := &run{span: span}
		stop := jobs.OnRelease(ctx, r.release)
		defer func() {
			stop()
			p := recover()
			if r.ended.CompareAndSwap(false, true) {
				if p != nil {
					panicked(span, p)
				} else {
					o.finish(ctx, span, job, err)
				}
				span.End()
			}
			if p != nil {
				panic(p)
			}
		}()
		return next(ctx)
	}
}

// The options a run's span starts with: a consumer, and with a link to
// the enqueue's span, a new root.
var (
	consumer = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	newRoot  = trace.WithNewRoot()
)

// logAttrs are the trace ids a run's logger carries.
func logAttrs(sc trace.SpanContext) []slog.Attr {
	return []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}

// run is the span of one run that records, ended once: when the run
// returns, or when the worker releases the job while it still runs.
type run struct {
	span  trace.Span
	ended atomic.Bool
}

// release ends the span of a run the worker released while it ran.
func (r *run) release() {
	if r.ended.CompareAndSwap(false, true) {
		r.span.AddEvent(EventReleased, trace.WithAttributes(ReasonKey.String("the worker shut down while the job ran")))
		r.span.SetAttributes(OutcomeKey.String(string(jobs.OutcomeReleased)))
		r.span.End()
	}
}

// finish records a run's outcome on its span.
func (o *Integration) finish(ctx context.Context, span trace.Span, job jobs.JobInfo, err error) {
	v := jobs.Classify(ctx, job, err)
	if v.Outcome == jobs.OutcomeCompleted {
		// No attribute: a completed run is the common case, and growing
		// the span's attributes for it would cost more than the rest.
		return
	}
	span.SetAttributes(OutcomeKey.String(string(v.Outcome)))
	switch v.Outcome {
	case jobs.OutcomeSnoozed:
		span.AddEvent(EventSnoozed, trace.WithAttributes(WaitKey.Float64(v.Wait.Seconds())))
	case jobs.OutcomeThrottled:
		span.AddEvent(EventRetryAfter, trace.WithAttributes(WaitKey.Float64(v.Wait.Seconds()), ReasonKey.String(v.Reason)))
	case jobs.OutcomeCancelled:
		span.AddEvent(EventCancelled, trace.WithAttributes(ReasonKey.String(v.Reason)))
	case jobs.OutcomeReleased:
		span.AddEvent(EventReleased, trace.WithAttributes(ReasonKey.String("the worker shut down; the job was cancelled and goes back to ready")))
	default:
		span.RecordError(err)
		span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, v.Reason)
	}
}

// panicked records a run whose handler (or middleware inside this one)
// panicked with p as a failed attempt: outcome "panicked", status Error,
// an exception event with the stack (recorded while the panic unwinds, so
// it shows where it happened) and error.type: p's Go type when p is an
// error, else "panic".
func panicked(span trace.Span, p any) {
	var err error
	errType := "panic"
	if e, ok := p.(error); ok {
		err, errType = fmt.Errorf("panic: %w", e), fmt.Sprintf("%T", e)
	} else {
		err = fmt.Errorf("panic: %v", p)
	}
	span.SetAttributes(OutcomeKey.String("panicked"), semconv.ErrorTypeKey.String(errType))
	span.RecordError(err, trace.WithStackTrace(true))
	span.SetStatus(codes.Error, err.Error())
}

// setRunAttrs sets a run span's attributes: its series' (the queue's and
// the kind's), the job's, and those about limits only when the job has
// limits, or was deferred. They are gathered in a pooled slice, which the
// span copies.
func setRunAttrs(span trace.Span, s *series, job jobs.JobInfo) {
	p := attrPool.Get().(*[]attribute.KeyValue)
	attrs := append((*p)[:0], s.spanAttrs...)
	attrs = append(attrs,
		semconv.MessagingMessageID(strconv.FormatInt(job.ID, 10)),
		AttemptKey.Int(job.Attempt),
		PriorityKey.Int(job.Priority),
	)
	if len(job.Budgets) > 0 {
		keys := make([]string, len(job.Budgets))
		for i, b := range job.Budgets {
			keys[i] = b.Key
		}
		attrs = append(attrs, BudgetsKey.StringSlice(keys))
	}
	if job.Deferrals > 0 {
		attrs = append(attrs, DeferralsKey.Int(job.Deferrals), DeferralReasonKey.String(job.DeferralReason),
			LimitWaitKey.Float64(job.LimitWait.Seconds()))
	}
	if job.ConcurrencyKey != "" {
		attrs = append(attrs, ConcurrencyKeyKey.String(job.ConcurrencyKey))
	}
	span.SetAttributes(attrs...)
	clear(attrs)
	*p = attrs[:0]
	attrPool.Put(p)
}

// attrPool holds the slices setRunAttrs gathers attributes in.
var attrPool = sync.Pool{New: func() any { return new([]attribute.KeyValue) }}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
