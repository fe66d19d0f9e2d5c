package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

// discardExporter takes spans and drops them: the cost a run pays for
// tracing, up to the wire.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// newBenchOtel returns the OpenTelemetry integration --otel wires into the
// bench's client and workers: the sampled fraction of traces batched (the
// SDK's defaults) to an exporter that drops them, and metrics recorded for
// a reader that is never collected. close shuts the providers down.
func newBenchOtel(sample float64) (*otelsluice.Integration, func(), error) {
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))
	if sample >= 1 {
		sampler = sdktrace.AlwaysSample()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(sampler))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o, err := otelsluice.New(otelsluice.Config{TracerProvider: tp, MeterProvider: mp})
	closeFn := func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return o, closeFn, nil
}

// clientConfig is the bench client's config: instrumented with --otel.
func (b *bench) clientConfig() jobs.ClientConfig {
	if b.otel == nil {
		return jobs.ClientConfig{}
	}
	return b.otel.InstrumentClient(jobs.ClientConfig{})
}

// workerConfig returns cfg, instrumented with --otel.
func (b *bench) workerConfig(cfg jobs.WorkerConfig) jobs.WorkerConfig {
	if b.otel == nil {
		return cfg
	}
	return b.otel.InstrumentWorker(cfg)
}
