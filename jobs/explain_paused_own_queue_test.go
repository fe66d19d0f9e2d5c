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

// pausedSerial and pausedLimited are explain_paused_test.go's.

// jobs.Explanation.Ahead: "the jobs whose turn comes before this one's in
// the line it waits in"; docs/concurrency.md: the blocked jobs of a paused
// queue "keep their places" in their key's line. Explain of a blocked job
// of a paused queue left out every blocked job of the paused queue
// (JobQueueNotPaused in BlockedAhead), its own queue's jobs ahead of it
// included: with two of its queue's jobs before it in the key's line,
// explain said "0 blocked job(s) before it; queue b is paused too, so it
// waits for a resume after that", and after the resume it is the third
// to get the slot. Only other paused queues' jobs are passed over now.
func TestExplainOfAPausedQueuesBlockedJobCountsItsOwnQueuesJobsAhead(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var order []int64
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[pausedSerial]) error {
			order = append(order, j.ID)
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[pausedSerial]{To: 1, Key: "one"})))
		holder := h.enqueue(pausedSerial{N: 0}, jobs.Queue("b"))
		var blocked []int64
		for i := 1; i <= 3; i++ {
			id := h.enqueue(pausedSerial{N: i}, jobs.Queue("b"))
			require.Equal(t, engine.StateBlocked, h.job(id).State)
			blocked = append(blocked, id)
		}
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		last := blocked[2]
		e := h.explain(last)
		require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)
		ahead := e.Ahead.N

		// What happens after the resume: the key's line, in order.
		require.NoError(t, h.store.ResumeQueue(ctx, "b", t0))
		for range 4 {
			h.drain(jobs.WorkerConfig{Queues: []string{"b"}, Concurrency: 1})
			_, _, err := h.store.MaintainSemaphores(ctx, engine.At(t0), 100)
			require.NoError(t, err)
		}
		require.Equal(t, append([]int64{holder}, blocked...), order)
		require.EqualValues(t, 2, ahead, "explain said %q: the two blocked jobs of its own queue before it got the slot first", e.Summary)
	})
}

// The same for a parked job of a paused queue: ParkedAhead left out every
// parked job of a paused queue, its own queue's before it included, so
// explain of the last of a paused queue's parked jobs said "0 parked
// job(s) of the budget get slots before it" while the others of its queue
// are ahead of it in the budget's line (priority, then id).
func TestExplainOfAPausedQueuesParkedJobCountsItsOwnQueuesJobsAhead(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[pausedLimited]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[pausedLimited]{To: 1, Per: time.Second, Key: "global"})))
		var ids []int64
		for i := range 6 {
			ids = append(ids, h.enqueue(pausedLimited{N: i}, jobs.Queue("b")))
		}
		h.drain(jobs.WorkerConfig{Queues: []string{"b"}, Horizon: time.Second})
		var parked []int64
		for _, id := range ids {
			if h.job(id).State == engine.StateParked {
				parked = append(parked, id)
			}
		}
		require.GreaterOrEqual(t, len(parked), 2, "queue b has parked jobs")
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		last := parked[len(parked)-1]
		e := h.explain(last)
		require.Equal(t, jobs.ReasonParked, e.Reason, e.Summary)
		require.EqualValues(t, len(parked)-1, e.Ahead.N,
			"explain said %q: %d parked job(s) of its own queue come before it in the budget's line", e.Summary, len(parked)-1)
	})
}
