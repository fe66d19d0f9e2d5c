package otelsluice

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/jobs"
)

// EnqueueMiddleware returns the enqueue middleware: a producer span per
// enqueue (one for the whole batch of an EnqueueMany), named "enqueue"
// and the queue, a child of the span in the caller's context; its trace
// context is written into each job's metadata (by the propagator once per
// call, whatever the batch's size) unless nothing would read it (see
// carries). The span ends with the enqueue's outcome (jobs.OnEnqueueDone):
// after its commit, naming the job (messaging.message.id) when one was
// enqueued, or with an Error status and the error when the enqueue failed,
// its commit included, and wrote nothing.
func (o *Integration) EnqueueMiddleware() jobs.EnqueueMiddleware {
	return func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) (err error) {
		if len(js) == 0 {
			return next(ctx)
		}
		queue, kind := js[0].Queue, js[0].Kind
		for _, j := range js[1:] {
			if j.Queue != queue {
				queue = ""
			}
			if j.Kind != kind {
				kind = ""
			}
		}
		name := "enqueue"
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("enqueue"),
			semconv.MessagingOperationTypeSend,
		}
		if queue != "" {
			name += " " + queue
			attrs = append(attrs, semconv.MessagingDestinationName(queue))
		}
		if kind != "" {
			attrs = append(attrs, KindKey.String(kind))
		}
		if len(js) > 1 {
			attrs = append(attrs, semconv.MessagingBatchMessageCount(len(js)))
		}
		ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		// The span ends with the enqueue's outcome, once it is settled:
		// after the commit (which may fail once next returned nil), or
		// the rollback. Outside a client's enqueue, when this returns.
		end := func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			} else if len(js) == 1 {
				span.SetAttributes(semconv.MessagingMessageID(strconv.FormatInt(js[0].Result.ID, 10)), JoinedKey.Bool(js[0].Result.Joined))
			}
			span.End()
		}
		if !jobs.OnEnqueueDone(ctx, end) {
			defer func() { end(err) }()
		}
		if o.carries(span.SpanContext()) {
			// The context is the same for every job of the batch:
			// injected once, copied into each.
			tc := propagation.MapCarrier{}
			o.prop.Inject(ctx, tc)
			for _, j := range js {
				for k, v := range tc {
					j.SetMetadata(k, v)
				}
			}
		}
		err = next(ctx)
		return err
	}
}

// carries reports whether the jobs of an enqueue whose span is sc carry
// its trace context. They do not when the span was sampled out, the run's
// span only links to it (not ChildOf) and the propagator is the default:
// the link would name a span no backend recorded, and the metadata would
// cost every claim of the job about 75 bytes of row for nothing. With
// ChildOf the run needs the parent's sampling decision, and another
// propagator may carry more than the trace (baggage).
func (o *Integration) carries(sc trace.SpanContext) bool {
	return sc.IsSampled() || o.cfg.ChildOf || !o.defaultProp
}
