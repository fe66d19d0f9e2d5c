package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Perform runs the handler registered for the kind of args directly, as
// the first attempt of a job: no database, no claim, no limits, no
// retries, no middleware (a worker's). The args go through the same JSON
// encoding a stored job's do, so a field that would not survive storage
// fails here too. The kind's Timeout applies, on the real clock, as a
// worker applies it: the handler's context ends with ErrJobTimeout as its
// cause, and an error returned after that wraps ErrJobTimeout. Tests use
// it to exercise a handler.
func Perform[T Args](ctx context.Context, r *Registry, args T) error {
	k := r.lookup(args.Kind())
	if k == nil || k.work == nil {
		return fmt.Errorf("jobs: perform: %w: no handler for %q", ErrUnknownKind, args.Kind())
	}
	body, err := encodeArgs(args)
	if err != nil {
		return fmt.Errorf("jobs: perform %s: %w", args.Kind(), err)
	}
	decoded, err := k.decode(body, false)
	if err != nil {
		return fmt.Errorf("jobs: perform %s: decode args: %w", args.Kind(), err)
	}
	j := &engine.Job{Kind: k.name, Queue: k.cfg.queue, Priority: k.cfg.priority, Args: body,
		Attempt: 1, MaxAttempts: k.cfg.maxAttempts, CreatedAt: time.Now()}
	if k.cfg.timeout <= 0 {
		return call(ctx, k, j, nil, decoded, nil, nil, JobInfo{}, nil, 0)
	}
	jctx, cancel := context.WithTimeoutCause(ctx, k.cfg.timeout, ErrJobTimeout)
	defer cancel()
	return timedOut(jctx, k.cfg.timeout, call(jctx, k, j, nil, decoded, nil, nil, JobInfo{}, nil, k.cfg.timeout))
}
