package otelsluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkMiddleware measures what the integration adds to one run: the
// consumer span (sampled and batched to an exporter that drops it, or not
// sampled) and the run's metrics (recorded for a reader never collected),
// around a no-op.
func BenchmarkMiddleware(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(c.sampler))
			defer tp.Shutdown(context.Background())
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			o, err := otelsluice.New(otelsluice.Config{TracerProvider: tp, MeterProvider: mp})
			if err != nil {
				b.Fatal(err)
			}
			mw, hooks := o.Middleware(), o.Hooks()
			now := time.Now()
			info := jobs.JobInfo{ID: 1, Kind: "bench", Queue: "default", Attempt: 1, MaxAttempts: 25, EnqueuedAt: now, ClaimedAt: now,
				Metadata: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
			next := func(context.Context) error { return nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = mw(ctx, info, next)
				hooks.OnFinish(jobs.FinishEvent{JobID: 1, Kind: "bench", Queue: "default", Attempt: 1, Outcome: jobs.OutcomeCompleted})
			}
		})
	}
}

// BenchmarkSDKFloor makes, with the SDK alone and nothing of sluice's, what
// BenchmarkMiddleware's sampled run makes: a consumer span, a new root
// linked to a remote span, with the same eight attributes, ended, and two
// histogram measurements with attribute sets made once; the counter is an
// atomic add. The difference between the two is what the integration adds
// to the SDK's own cost.
func BenchmarkSDKFloor(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tracer := tp.Tracer("floor")
	meter := mp.Meter("floor")
	latency, err := meter.Float64Histogram("latency")
	if err != nil {
		b.Fatal(err)
	}
	duration, err := meter.Float64Histogram("duration")
	if err != nil {
		b.Fatal(err)
	}
	system, queue, kind := attribute.String("messaging.system", "sluice"), attribute.String("messaging.destination.name", "default"), attribute.String("sluice.kind", "bench")
	latencySet := metric.WithAttributeSet(attribute.NewSet(system, queue, kind))
	durationSet := metric.WithAttributeSet(attribute.NewSet(system, queue, kind, attribute.String("sluice.outcome", "completed")))
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		latency.Record(ctx, 0, latencySet)
		_, span := tracer.Start(ctx, "process default", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
			trace.WithLinks(trace.Link{SpanContext: remote}))
		span.SetAttributes(system, queue, attribute.String("messaging.operation.name", "process"), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.message.id", strconv.Itoa(1)), kind, attribute.Int("sluice.attempt", 1), attribute.Int("sluice.priority", 0))
		span.End()
		duration.Record(ctx, 0, durationSet)
	}
}
