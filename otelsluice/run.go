package otelsluice

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
// releases while it still runs gets its span ended there.
func (o *Integration) Middleware() jobs.Middleware {
	return func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) (err error) {
		if !job.ClaimedAt.IsZero() && !job.EnqueuedAt.IsZero() {
			o.latency.Record(ctx, max(job.ClaimedAt.Sub(job.EnqueuedAt), 0).Seconds(), o.runOpt(job.Queue, job.Kind, ""))
		}
		opts := make([]trace.SpanStartOption, 1, 3)
		opts[0] = trace.WithSpanKind(trace.SpanKindConsumer)
		if len(job.Metadata) > 0 {
			producer := trace.SpanContextFromContext(o.prop.Extract(context.Background(), readCarrier(job.Metadata)))
			switch {
			case producer.IsValid() && o.cfg.ChildOf:
				ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
			case producer.IsValid():
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
			}
		}
		ctx, span := o.tracer.Start(ctx, "process "+job.Queue, opts...)
		// The attributes go on a span that records, after it starts: a
		// span sampled out costs none of them.
		recording := span.IsRecording()
		if recording {
			span.SetAttributes(runAttrs(job)...)
		}
		if recording && job.Deferrals > 0 {
			span.AddEvent(EventDeferred, trace.WithAttributes(
				DeferralsKey.Int(job.Deferrals), ReasonKey.String(job.DeferralReason),
				LimitWaitKey.Float64(job.LimitWait.Seconds()), DeferredAtKey.String(timeText(job.DeferredAt))))
		}
		if sc := span.SpanContext(); sc.IsValid() {
			jobs.AddLogAttrs(ctx, func() []slog.Attr {
				return []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
			})
		}
		// The span ends once: when the run returns, or when the worker
		// releases the job while it still runs.
		var ended atomic.Bool
		stop := jobs.OnRelease(ctx, func() {
			if ended.CompareAndSwap(false, true) {
				span.AddEvent(EventReleased, trace.WithAttributes(ReasonKey.String("the worker shut down while the job ran")))
				span.SetAttributes(OutcomeKey.String(string(jobs.OutcomeReleased)))
				span.End()
			}
		})
		defer func() {
			stop()
			r := recover()
			if ended.CompareAndSwap(false, true) {
				switch {
				case r != nil:
					span.SetAttributes(OutcomeKey.String("panicked"))
					span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", r))
				case recording:
					o.finish(ctx, span, job, err)
				}
				span.End()
			}
			if r != nil {
				panic(r)
			}
		}()
		return next(ctx)
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

// runAttrs are a run span's attributes. Those about limits are there only
// when the job has limits, or was deferred: every attribute is copied on
// its way into a span.
func runAttrs(job jobs.JobInfo) []attribute.KeyValue {
	n := 8
	if len(job.Budgets) > 0 {
		n++
	}
	if job.Deferrals > 0 {
		n += 3
	}
	if job.ConcurrencyKey != "" {
		n++
	}
	attrs := make([]attribute.KeyValue, 0, n)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingDestinationName(job.Queue),
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingMessageID(strconv.FormatInt(job.ID, 10)),
		KindKey.String(job.Kind),
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
	return attrs
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
