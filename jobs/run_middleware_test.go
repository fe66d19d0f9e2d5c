package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type r7mw struct{ N int }

func (r7mw) Kind() string { return "r7mw" }

// docs/observability.md, "Around each run": "the worker decides the job's
// fate from what the outermost middleware returns … returning nil
// completes it. Not calling next skips the handler", and "a panic in
// middleware fails the attempt as a panicking handler does" — also after
// a handler that succeeded. A middleware that returns an error after a
// successful handler retries the job.
func TestRunMiddlewareDecidesTheOutcomeAfterTheHandler(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ran atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[r7mw]) error {
			ran.Add(1)
			return nil
		}))
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			switch job.ID % 3 {
			case 1: // skips the handler
				return nil
			case 2: // fails after the handler succeeded
				if err := next(ctx); err != nil {
					return err
				}
				return errors.New("post-processing failed")
			}
			_ = next(ctx)
			panic("middleware after next")
		}
		ids := []int64{h.enqueue(r7mw{N: 1}), h.enqueue(r7mw{N: 2}), h.enqueue(r7mw{N: 3})}
		res := h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{mw}})
		require.Equal(t, 1, res.Completed)
		require.Equal(t, 2, res.Retried)
		for _, id := range ids {
			j := h.job(id)
			switch id % 3 {
			case 1:
				require.Equal(t, engine.StateCompleted, j.State)
			case 2:
				require.Equal(t, engine.StateScheduled, j.State)
				require.Equal(t, "post-processing failed", j.LastError)
			default:
				require.Equal(t, engine.StateScheduled, j.State)
				require.Contains(t, j.LastError, "panic: middleware after next")
			}
		}
		require.Equal(t, int32(2), ran.Load())
	})
}

// A middleware that snoozes a job holding a concurrency slot keeps the slot
// ("A retry keeps its slot while it waits (and so does a snooze)",
// docs/concurrency.md), and the attempt is given back.
func TestMiddlewareSnoozeKeepsTheSlotAndTheAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[accountJob]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }})))
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			return jobs.Snooze(time.Minute)
		}
		a := h.enqueue(accountJob{Account: 1, N: 1})
		b := h.enqueue(accountJob{Account: 1, N: 2})
		res := h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{mw}})
		require.Equal(t, 1, res.Snoozed)
		ja := h.job(a)
		require.Equal(t, engine.StateScheduled, ja.State)
		require.True(t, ja.HoldsSlot)
		require.Zero(t, ja.Attempt)
		require.Equal(t, engine.StateBlocked, h.job(b).State)
	})
}
