package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type pausedSerial struct{ N int }

func (pausedSerial) Kind() string { return "paused_serial" }

type pausedLimited struct{ N int }

func (pausedLimited) Kind() string { return "paused_limited" }

// jobs.Explanation.Ahead: "the jobs whose turn comes before this one's in
// the line it waits in"; docs/concurrency.md: "The blocked jobs of a
// paused queue are passed over: they keep their places". A key shared by
// two queues: queue b's blocked job is older than queue a's, and b is
// paused. The slot the holder gives back goes to a's job, passing b's
// over, and explain counts no job ahead of it (it counted b's); of b's
// job, it says it waits for the resume.
func TestExplainBlockedAheadPassesOverAPausedQueuesBlockedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var order []int64
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[pausedSerial]) error {
			order = append(order, j.ID)
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[pausedSerial]{To: 1, Key: "one"})))
		holder := h.enqueue(pausedSerial{N: 1}, jobs.Queue("a"))
		other := h.enqueue(pausedSerial{N: 2}, jobs.Queue("b"))
		mine := h.enqueue(pausedSerial{N: 3}, jobs.Queue("a"))
		require.Equal(t, engine.StateBlocked, h.job(other).State)
		require.Equal(t, engine.StateBlocked, h.job(mine).State)
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		e := h.explain(mine)
		require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)
		// The paused queue's job waits for the resume, not for a holder
		// (whose slot passes it over).
		eo := h.explain(other)
		require.Equal(t, "not before the queue is resumed", eo.EstimateBasis, eo.Summary)

		// What happens: the holder finishes and its slot goes to mine.
		h.drain(jobs.WorkerConfig{Queues: []string{"a"}, Concurrency: 1})
		require.Equal(t, []int64{holder, mine}, order)
		require.Equal(t, engine.StateBlocked, h.job(other).State)
		require.Zero(t, e.Ahead.N, "explain said %q: %s blocked job(s) before it, but the paused queue's job was passed over", e.Summary, e.Ahead)
	})
}

// The same for a parked job: docs/concurrency.md and the LockParked
// statement pass a paused queue's parked jobs over when a budget unparks.
// A budget shared by two queues, whose paused queue b parked first:
// explain counts none of b's parked jobs as getting slots before a's
// (it counted them, and so estimated a's start several intervals too
// late).
func TestExplainParkedAheadPassesOverAPausedQueuesParkedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[pausedLimited]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[pausedLimited]{To: 1, Per: time.Second, Key: "global"})))
		var bs, as []int64
		for i := range 5 {
			bs = append(bs, h.enqueue(pausedLimited{N: i}, jobs.Queue("b")))
		}
		h.drain(jobs.WorkerConfig{Queues: []string{"b"}, Horizon: time.Second})
		for i := range 5 {
			as = append(as, h.enqueue(pausedLimited{N: 10 + i}, jobs.Queue("a")))
		}
		h.drain(jobs.WorkerConfig{Queues: []string{"a"}, Horizon: time.Second})
		parkedB := 0
		for _, id := range bs {
			if h.job(id).State == engine.StateParked {
				parkedB++
			}
		}
		require.Positive(t, parkedB, "queue b has parked jobs")
		var parkedA []int64
		for _, id := range as {
			if h.job(id).State == engine.StateParked {
				parkedA = append(parkedA, id)
			}
		}
		require.GreaterOrEqual(t, len(parkedA), 2, "queue a has parked jobs")
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		first := parkedA[0] // the first of a's parked jobs: nothing of a queue not paused is before it
		e := h.explain(first)
		require.Equal(t, jobs.ReasonParked, e.Reason, e.Summary)
		require.Zero(t, e.Ahead.N, "explain said %q, counting %d parked job(s) of paused queue b, which the budget passes over",
			e.Summary, parkedB)
		// The second counts the first, of its own queue: the paused
		// queue's jobs are left out, not every other job.
		e = h.explain(parkedA[1])
		require.EqualValues(t, 1, e.Ahead.N, e.Summary)
	})
}

// jobs.ReasonScheduled: "the job was enqueued to run later";
// ReasonQueuePaused: "the job's queue is paused". A job with a
// concurrency key enqueued, to run now, into a paused queue waits
// scheduled and due for the resume (docs/concurrency.md), as a plain job
// waits ready, and explain gives both queue_paused (it said this one was
// "scheduled to run at" its enqueue time: it was enqueued to run now, and
// only the pause holds it).
func TestExplainAPausedQueuesSlotlessDueJobSaysThePauseHoldsIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[pausedSerial]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[pausedSerial]{To: 1, Key: "one"})))
		require.NoError(t, h.store.PauseQueue(ctx, "default", t0))
		id := h.enqueue(pausedSerial{N: 1})
		require.Equal(t, engine.StateScheduled, h.job(id).State, "a paused queue's job takes no slot")

		e := h.explain(id)
		require.Equal(t, jobs.ReasonQueuePaused, e.Reason, "explain says %q", e.Summary)
		require.Contains(t, e.Summary, "paused")
		require.True(t, e.EstimatedStart.IsZero(), "no start before the resume: %s", e.EstimateBasis)

		// One enqueued to run later is scheduled, the pause or not, until
		// it is due.
		later := h.enqueue(pausedSerial{N: 2}, jobs.Delay(time.Hour))
		require.Equal(t, jobs.ReasonScheduled, h.explain(later).Reason)
	})
}
