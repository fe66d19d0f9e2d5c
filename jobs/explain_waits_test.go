package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type waitsSerial struct{ N int }

func (waitsSerial) Kind() string { return "waits_serial" }

type waitsUpstream struct{ N int }

func (waitsUpstream) Kind() string { return "waits_upstream" }

// docs/concurrency.md, Lowering To: "the key's limit is the one most
// recently declared", and a slot is handed out only while the holders are
// fewer than it. jobs.ConcurrencyExplanation.To is "how many jobs of the
// key may hold a slot at once": after a deploy lowered To from 2 to 1 and
// one holder finished, explain says a blocked job enqueued under To 2
// waits with "1 of 1 slot(s) held" (it said "1 of 2": a slot free, so why
// blocked?).
func TestExplainReportsTheKeysLimitNotTheJobsOldTo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		noop := func(context.Context, *jobs.Job[waitsSerial]) error { return nil }
		require.NoError(t, jobs.Register(h.reg, noop, jobs.ConcurrencyLimit(concurrency.Limit[waitsSerial]{To: 2, Key: "k"})))
		lowered := jobs.NewRegistry() // the next deploy
		require.NoError(t, jobs.Register(lowered, noop, jobs.ConcurrencyLimit(concurrency.Limit[waitsSerial]{To: 1, Key: "k"})))
		next := jobs.NewClient(testdb.Public(h.store), lowered, jobs.ClientConfig{Clock: h.clock})

		first := h.enqueue(waitsSerial{N: 1})
		h.enqueue(waitsSerial{N: 2})
		old := h.enqueue(waitsSerial{N: 3}) // blocked under To 2
		_, err := next.Enqueue(ctx, waitsSerial{N: 4})
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

// docs/concurrency.md: a paused queue's blocked jobs are passed over, "and
// the dispatcher hands them free slots within a tick of the resume". A
// job blocked on a key with a free slot, or whose key has no row, waits
// for the dispatcher's next tick, not for a holder to finish: explain says
// so (it said "a slot is given back when a holder finishes", of a key that
// had no holder).
func TestExplainABlockedJobWithAFreeSlotWaitsForTheDispatcher(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitsSerial]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[waitsSerial]{To: 1, Key: "one"})))
		h.enqueue(waitsSerial{N: 1}, jobs.Queue("a"))
		blocked := h.enqueue(waitsSerial{N: 2}, jobs.Queue("b"))
		require.NoError(t, h.store.PauseQueue(ctx, "b", t0))
		h.drain(jobs.WorkerConfig{Queues: []string{"a"}}) // the holder gives its slot back, passing b's job over
		require.NoError(t, h.store.ResumeQueue(ctx, "b", t0))
		require.Equal(t, engine.StateBlocked, h.job(blocked).State, "the dispatcher has not ticked")

		free := func(e *jobs.Explanation) {
			t.Helper()
			require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)
			require.Equal(t, 0, e.Concurrency.Held)
			require.Equal(t, 1, e.Concurrency.To)
			require.Empty(t, e.Concurrency.Holders)
			require.NotContains(t, e.EstimateBasis, "holder", "no job holds a slot of the key")
			require.Contains(t, e.EstimateBasis, "dispatcher")
			require.Contains(t, e.Summary, "free")
		}
		free(h.explain(blocked))

		// The same with no row for the key: the dispatcher's tick takes
		// it (BlockedKeys), under the job's own To.
		_, err := h.store.DB().Exec(ctx, `DELETE FROM sluice_semaphores`)
		require.NoError(t, err)
		free(h.explain(blocked))
	})
}

// docs/rate-limits.md, When the upstream says 429: the job goes back to
// scheduled until the upstream's wait is over, and its budgets are held
// back until then. It was not deferred, and holds no slot on the budget
// (a claim gives slots; a 429 moves the budget's cursor past them all):
// explain says what holds it (it said "deferred by rate limit …: it
// holds the slot at …, after 0 other slot(s) of the budget").
func TestExplainAJobAnUpstreamRefusedHoldsNoSlot(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitsUpstream]) error {
			if runs++; runs == 1 {
				return jobs.RetryAfter(time.Minute)
			}
			return nil
		}, jobs.RateLimit(ratelimit.Limit[waitsUpstream]{To: 10, Per: time.Second, Key: "global"})))
		id := h.enqueue(waitsUpstream{N: 1})
		h.drain(jobs.WorkerConfig{})
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.NotEmpty(t, j.WaitKey, "it waits on its budget")

		e := h.explain(id)
		require.Equal(t, jobs.ReasonRateLimited, e.Reason, e.Summary)
		require.NotContains(t, e.Summary, "slot", "a 429 gives the job no slot on the budget")
		require.NotContains(t, e.Summary, "deferred", "a 429 is not a deferral (docs/observability.md)")
		require.Contains(t, e.Summary, "429")
		require.Nil(t, e.Ahead, "it waits in no line of the budget's slots")
		require.Equal(t, t0.Add(time.Minute), e.EstimatedStart)
		require.Zero(t, e.Deferrals)

		// A job the budget deferred still holds its slot.
		var ids []int64
		for i := range 3 {
			ids = append(ids, h.enqueue(waitsUpstream{N: 10 + i}))
		}
		h.clock.Advance(time.Minute)
		h.drain(jobs.WorkerConfig{})
		for _, id := range ids {
			if j := h.job(id); j.State == engine.StateScheduled {
				e := h.explain(id)
				require.Equal(t, jobs.ReasonRateLimited, e.Reason, e.Summary)
				require.Contains(t, e.Summary, "holds the slot")
				require.NotNil(t, e.Ahead)
				return
			}
		}
		t.Fatal("no job was deferred")
	})
}
