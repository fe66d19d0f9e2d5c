package otelsluice_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/store"
)

type Welcome struct{ UserID int64 }

func (Welcome) Kind() string { return "welcome" }

// The request's trace continues into the job's run.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	s, _ := store.Open(ctx, "sqlite:"+filepath.Join(dir, "jobs.db"))
	defer s.Close()
	_, _ = s.MigrateUp(ctx, 0)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	o, _ := otelsluice.New(otelsluice.Config{TracerProvider: tp, ChildOf: true})

	reg := jobs.NewRegistry()
	var runTrace trace.TraceID
	_ = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Welcome]) error {
		runTrace = trace.SpanContextFromContext(ctx).TraceID()
		return nil
	})
	client := jobs.NewClient(s, reg, o.InstrumentClient(jobs.ClientConfig{}))
	reqCtx, request := tp.Tracer("http").Start(ctx, "POST /signup")
	_, _ = client.Enqueue(reqCtx, Welcome{UserID: 42})
	request.End()

	w, _ := jobs.NewWorker(s, reg, o.InstrumentWorker(jobs.WorkerConfig{}))
	_, _ = w.Drain(ctx)

	fmt.Println("the handler ran in the request's trace:", runTrace == request.SpanContext().TraceID())
	for _, sp := range spans.Ended() {
		fmt.Println(sp.Name(), sp.SpanKind())
	}
	// Output:
	// the handler ran in the request's trace: true
	// enqueue default producer
	// POST /signup internal
	// process default consumer
}
