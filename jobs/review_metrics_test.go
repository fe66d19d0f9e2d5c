package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type revSerial struct{ N int }

func (revSerial) Kind() string { return "rev_serial" }

type revLimited struct{ N int }

func (revLimited) Kind() string { return "rev_limited" }

// jobs.Explanation.Ahead: "the jobs whose turn comes before this one's in
// the line it waits in"; docs/concurrency.md: "The blocked jobs of a
// paused queue are passed over: they keep their places". A key shared by
// two queues: queue b's blocked job is older than queue a's, and b is
// paused. The slot the holder gives back goes to a's job, passing b's
// over, yet explain counts b's job as ahead of it.
func TestReviewExplainBlockedAheadCountsAPausedQueuesBlockedJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var order []int64
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[revSerial]) error {
			order = append(order, j.ID)
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[revSerial]{To: 1, Key: "one"})))
		holder := h.enqueue(revSerial{N: 1}, jobs.Queue("a"))
		other := h.enqueue(revSerial{N: 2}, jobs.Queue("b"))
		mine := h.enqueue(revSerial{N: 3}, jobs.Queue("a"))
		require.Equal(t, engine.StateBlocked, h.job(other).State)
		require.Equal(t, engine.StateBlocked, h.job(mine).State)
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		e := h.explain(mine)
		require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)

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
// explain counts b's parked jobs as getting slots before a's, and so
// estimates a's start several intervals too late.
func TestReviewExplainParkedAheadCountsAPausedQueuesParkedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[revLimited]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[revLimited]{To: 1, Per: time.Second, Key: "global"})))
		var bs, as []int64
		for i := range 5 {
			bs = append(bs, h.enqueue(revLimited{N: i}, jobs.Queue("b")))
		}
		h.drain(jobs.WorkerConfig{Queues: []string{"b"}, Horizon: time.Second})
		for i := range 5 {
			as = append(as, h.enqueue(revLimited{N: 10 + i}, jobs.Queue("a")))
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
		require.NotEmpty(t, parkedA, "queue a has parked jobs")
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))

		first := parkedA[0] // the first of a's parked jobs: nothing of a queue not paused is before it
		e := h.explain(first)
		require.Equal(t, jobs.ReasonParked, e.Reason, e.Summary)
		require.Zero(t, e.Ahead.N, "explain said %q, counting %d parked job(s) of paused queue b, which the budget passes over",
			e.Summary, parkedB)
	})
}

// docs/concurrency.md, Lowering To: "the key's limit is the one most
// recently declared", and a slot is handed out only while the holders are
// fewer than it. jobs.ConcurrencyExplanation.To is "how many jobs of the
// key may hold a slot at once", but Explain reports the To the job was
// enqueued under whenever it has one, not the key's. After a deploy
// lowered To from 2 to 1 and one holder finished, explain says a blocked
// job waits with "1 of 2 slot(s) held" (a slot free, so why blocked?),
// while the key admits 1.
func TestReviewExplainReportsTheKeysLimitNotTheJobsOldTo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		noop := func(context.Context, *jobs.Job[revSerial]) error { return nil }
		require.NoError(t, jobs.Register(h.reg, noop, jobs.ConcurrencyLimit(concurrency.Limit[revSerial]{To: 2, Key: "k"})))
		lowered := jobs.NewRegistry() // the next deploy
		require.NoError(t, jobs.Register(lowered, noop, jobs.ConcurrencyLimit(concurrency.Limit[revSerial]{To: 1, Key: "k"})))
		next := jobs.NewClient(testdb.Public(h.store), lowered, jobs.ClientConfig{Clock: h.clock})

		first := h.enqueue(revSerial{N: 1})
		h.enqueue(revSerial{N: 2})
		old := h.enqueue(revSerial{N: 3}) // blocked under To 2
		_, err := next.Enqueue(ctx, revSerial{N: 4})
		require.NoError(t, err)
		_, err = h.store.CancelJobs(ctx, engine.At(t0), []int64{first}, "operator")
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, h.job(old).State, "one holder left, and the key's limit is 1")

		e := h.explain(old)
		require.Equal(t, jobs.ReasonBlocked, e.Reason)
		require.Equal(t, 1, e.Concurrency.Held)
		require.Equal(t, 1, e.Concurrency.To, "explain says %q: the key admits 1 now, not the job's old To", e.Summary)
	})
}

// jobs.ReasonScheduled: "the job was enqueued to run later";
// ReasonQueuePaused: "the job's queue is paused". A job with a
// concurrency key enqueued, to run now, into a paused queue waits
// scheduled and due for the resume (docs/concurrency.md), as a plain job
// waits ready. Explain gives the plain job queue_paused, but this one
// "scheduled to run at" its enqueue time, the time it "was enqueued to
// run at": it was enqueued to run now, and only the pause holds it.
func TestReviewExplainAPausedQueuesSlotlessJobSaysThePauseHoldsIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[revSerial]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[revSerial]{To: 1, Key: "one"})))
		require.NoError(t, h.store.PauseQueue(ctx, "default", t0))
		id := h.enqueue(revSerial{N: 1})
		require.Equal(t, engine.StateScheduled, h.job(id).State, "a paused queue's job takes no slot")

		e := h.explain(id)
		require.Equal(t, jobs.ReasonQueuePaused, e.Reason, "explain says %q", e.Summary)
	})
}

type revCharge struct{ N int }

func (revCharge) Kind() string { return "rev_charge" }

// docs/rate-limits.md: the DeferEvents, "and sluice_jobs_deferred_total,
// count every deferral the jobs record"; docs/observability.md: each
// deferral "is reported to OnDefer". guarantees.md knows of claims whose
// commit lands and whose reply is lost ("A claim whose outcome is
// unknown"): the worker releases the jobs it claimed, but the deferrals
// the same transaction recorded are reported to no one. The jobs record
// the lost claim's two deferrals; OnDefer (and so both counters) saw
// none of them.
func TestReviewAClaimWhoseReplyIsLostReportsTheDeferralsItRecorded(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[revCharge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[revCharge]{To: 1, Per: time.Minute, Key: "global"})))
		for i := range 3 {
			h.enqueue(revCharge{N: i})
		}
		s, db, _ := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		var mu sync.Mutex
		reported := 0
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(),
			Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) {
				mu.Lock()
				defer mu.Unlock()
				reported += e.Count
			}}})
		require.NoError(t, err)
		_, err = w.Drain(ctx)
		require.ErrorIs(t, err, errConnReset, "the claim's reply was lost")
		_, err = w.Drain(ctx)
		require.NoError(t, err)

		var recorded int64
		rows, err := h.store.DB().Query(ctx, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
		require.NoError(t, err)
		for rows.Next() {
			require.NoError(t, rows.Scan(&recorded))
		}
		rows.Close()
		// The lost claim deferred two jobs; the job it claimed, released,
		// is deferred by the next claim (the budget is spent), which is
		// reported: 3 recorded.
		require.EqualValues(t, 3, recorded, "the lost claim's deferrals landed")
		mu.Lock()
		defer mu.Unlock()
		require.EqualValues(t, recorded, reported, "every deferral the jobs record is reported once")
	})
}
