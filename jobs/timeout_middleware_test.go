package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type slowNote struct{ N int }

func (slowNote) Kind() string { return "slow_note" }

// A run its kind's Timeout ended reaches its middleware with the error
// the worker records: it wraps jobs.ErrJobTimeout and the handler's error,
// so a span's status says the run timed out. The job's last_error is what
// it always was, "job timed out after 1s: context canceled", once, with
// a middleware passing the error on or none; with one that wraps it, the
// middleware's words come first.
func TestMiddlewareSeesThatARunTimedOut(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{}, 3)
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[slowNote]) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, jobs.Timeout(time.Second), jobs.Backoff(func(int) time.Duration { return time.Hour })))
		var mu sync.Mutex
		seen := map[int64]error{}
		verdicts := map[int64]jobs.Verdict{}
		wrapping := false
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			err := next(ctx)
			mu.Lock()
			seen[job.ID], verdicts[job.ID] = err, jobs.Classify(ctx, job, err)
			mu.Unlock()
			if wrapping {
				return fmt.Errorf("traced: %w", err)
			}
			return err
		}
		for _, cfg := range []jobs.WorkerConfig{{Middleware: []jobs.Middleware{mw}}, {}, {Middleware: []jobs.Middleware{mw}}} {
			wrapping = cfg.Middleware != nil && len(seen) > 0
			id := h.enqueue(slowNote{N: len(seen)})
			go func() {
				<-started
				<-h.clock.WaitForTimerAt(h.clock.Now().Add(time.Second))
				h.clock.Advance(time.Second)
			}()
			require.Equal(t, 1, h.drain(cfg).Retried)
			want := "job timed out after 1s: context canceled"
			if wrapping {
				want = "traced: " + want
			}
			require.Equal(t, want, h.job(id).LastError)
			mu.Lock()
			if err, ok := seen[id]; ok {
				require.ErrorIs(t, err, jobs.ErrJobTimeout, "the middleware sees the timeout")
				require.ErrorIs(t, err, context.Canceled, "and the handler's error")
				require.Equal(t, "job timed out after 1s: context canceled", err.Error())
				require.Equal(t, jobs.OutcomeRetried, verdicts[id].Outcome)
				require.Equal(t, err.Error(), verdicts[id].Reason)
			}
			mu.Unlock()
		}
		require.Len(t, seen, 2)
	})
}

// A run whose kind's Timeout ended it, and whose handler returned only
// once the worker, shutting down, had cancelled its jobs (within the
// grace), is released, as the worker records it: Classify says so too,
// with the handler's context, whose own cause is the timeout.
func TestClassifySaysReleasedForATimedOutRunReleasedAtShutdown(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started, timedOut, unblock := make(chan struct{}), make(chan struct{}), make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[slowNote]) error {
			close(started)
			<-ctx.Done() // the timeout
			close(timedOut)
			<-unblock // tidying up
			return ctx.Err()
		}, jobs.Timeout(10*time.Second)))
		var mu sync.Mutex
		var verdict jobs.Verdict
		var finished []jobs.Outcome
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			err := next(ctx)
			mu.Lock()
			verdict = jobs.Classify(ctx, job, err)
			mu.Unlock()
			return err
		}
		id := h.enqueue(slowNote{N: 1})
		w := h.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, Middleware: []jobs.Middleware{mw},
			Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { mu.Lock(); finished = append(finished, e.Outcome); mu.Unlock() }}})
		stop := h.run(w)
		<-started
		<-h.clock.WaitForTimerAt(t0.Add(10 * time.Second))
		h.clock.Advance(10 * time.Second)
		<-timedOut
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(40 * time.Second))
			h.clock.Advance(30 * time.Second) // the shutdown timeout: the jobs are cancelled
			<-h.clock.WaitForTimerAt(t0.Add(41 * time.Second))
			close(unblock) // the handler returns within the grace
		}()
		stop()
		j := h.job(id)
		require.Equal(t, engine.StateReady, j.State, "released")
		require.Equal(t, 0, j.Attempt, "its attempt given back")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []jobs.Outcome{jobs.OutcomeReleased}, finished)
		require.Equal(t, jobs.OutcomeReleased, verdict.Outcome, "Classify agrees with the worker")
	})
}
