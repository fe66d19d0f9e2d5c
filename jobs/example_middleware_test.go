package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

type requestIDKey struct{}

// Middleware and metadata carry a request id from the request that
// enqueued a job to the run that does it.
func ExampleMiddleware() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	s, _ := store.Open(ctx, "sqlite:"+filepath.Join(dir, "jobs.db"))
	defer s.Close()
	_, _ = s.MigrateUp(ctx, 0)

	reg := jobs.NewRegistry()
	_ = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWelcome]) error {
		fmt.Println("handler: request", ctx.Value(requestIDKey{}), "tenant", j.Metadata["tenant"])
		return nil
	})

	// At enqueue: copy the request id from the context into the job.
	stamp := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
		for _, j := range js {
			if id, ok := ctx.Value(requestIDKey{}).(string); ok {
				j.SetMetadata("request_id", id)
			}
		}
		return next(ctx)
	}
	client := jobs.NewClient(s, reg, jobs.ClientConfig{Middleware: []jobs.EnqueueMiddleware{stamp}})
	reqCtx := context.WithValue(ctx, requestIDKey{}, "req-7")
	_, _ = client.Enqueue(reqCtx, SendWelcome{UserID: 42}, jobs.WithMetadata(map[string]string{"tenant": "acme"}))

	// At the run: put it back into the handler's context.
	restore := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
		fmt.Println("middleware: job", job.Kind, "attempt", job.Attempt, "deferrals", job.Deferrals)
		return next(context.WithValue(ctx, requestIDKey{}, job.Metadata["request_id"]))
	}
	w, _ := jobs.NewWorker(s, reg, jobs.WorkerConfig{Middleware: []jobs.Middleware{restore}})
	_, _ = w.Drain(ctx)
	// Output:
	// middleware: job send_welcome attempt 1 deferrals 0
	// handler: request req-7 tenant acme
}
