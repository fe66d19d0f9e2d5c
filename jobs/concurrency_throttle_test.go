package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// discardArgs is a kind whose concurrency limit discards.
type discardArgs struct{ N int }

func (discardArgs) Kind() string { return "discard_conc" }

// Guards docs/rate-limits.md, "When the upstream says 429": "a job that
// held a concurrency slot gives it back while it waits ... and takes one
// again when it comes back (or is blocked)", and docs/concurrency.md's
// Discard, which discards only a job becoming ready for the first time. A
// Discard kind's handler that returned jobs.RetryAfter gave its slot back,
// and the job was discarded when it came back to a taken slot; it is now
// blocked until the slot is free, and then runs.
func TestA429OnADiscardKindIsBlockedNotDiscardedWhenItComesBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var throttled atomic.Bool // the first run only
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[discardArgs]) error {
			if j.Args.N == 1 && throttled.CompareAndSwap(false, true) {
				return jobs.RetryAfter(time.Minute)
			}
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[discardArgs]{Key: "k", OnConflict: concurrency.Discard})))
		a := h.enqueue(discardArgs{N: 1})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Throttled)
		require.False(t, h.job(a).HoldsSlot, "it gave its slot back while it waits")
		b := h.enqueue(discardArgs{N: 2})
		require.Equal(t, engine.StateReady, h.job(b).State, "the next job took the free slot")

		h.clock.Advance(time.Minute + time.Second)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		j := h.job(a)
		require.NotEqual(t, engine.StateCancelled, j.State, "a throttled job was discarded: %q", j.LastError)
		require.Equal(t, engine.StateBlocked, j.State, "it waits for the slot b holds")

		// b runs and gives its slot to a, which runs in turn.
		res = h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed)
		require.Equal(t, engine.StateCompleted, h.job(a).State)
	})
}
