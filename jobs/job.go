// Package jobs is sluice's public API: typed job args, registration of
// handlers and their limits, the client that enqueues, and the worker that
// claims and runs jobs.
//
// A job's args are a struct with a Kind method:
//
//	type SyncAccount struct{ AccountID int64 }
//
//	func (SyncAccount) Kind() string { return "sync_account" }
//
// Register a handler for it, with options such as a rate limit:
//
//	reg := jobs.NewRegistry()
//	jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncAccount]) error {
//		return stripe.Sync(ctx, j.Args.AccountID)
//	}, jobs.RateLimit(ratelimit.Limit[SyncAccount]{To: 100, Per: time.Minute, Burst: 10, Key: "global"}))
//
// Enqueue with a Client, and run a Worker (and a dispatcher, see package
// dispatcher) to work the jobs.
package jobs

import (
	"context"
	"time"
)

// Args is implemented by every job's args type. Kind names the job type; it
// is stored with every job and must be stable across deploys.
type Args interface {
	Kind() string
}

// Job is one run of a job, as its handler sees it.
type Job[T Args] struct {
	// ID is the job's id.
	ID int64
	// Args are the job's decoded args.
	Args T
	// Kind is Args.Kind().
	Kind string
	// Queue is the queue the job was claimed from.
	Queue string
	// Priority is the job's priority: lower runs first.
	Priority int
	// Attempt counts this run: 1 for the first.
	Attempt int
	// MaxAttempts is how many runs the job gets before it fails for good.
	MaxAttempts int
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time
	// Calls are the args of every call the job collected, oldest first,
	// for a kind that coalesces with OnConflict: Collect; Args is the
	// first. For other jobs it holds Args alone.
	Calls []T
	// Metadata is the job's metadata (see WithMetadata and
	// EnqueueMiddleware); nil when it has none. Changing it stores
	// nothing.
	Metadata map[string]string
}

// Handler is implemented by types that work jobs of one kind.
type Handler[T Args] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// CallsHandler works the calls a coalescing job collected.
type CallsHandler[T Args] func(ctx context.Context, job *Job[T], calls []T) error

// HandlerFunc adapts a function to Handler.
type HandlerFunc[T Args] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f HandlerFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }
