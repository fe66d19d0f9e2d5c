package otelsluice_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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
