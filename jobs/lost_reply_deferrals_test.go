package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type lostDeferral struct{ N int }

func (lostDeferral) Kind() string { return "lost_deferral" }

// docs/rate-limits.md and docs/observability.md: OnDefer, and the
// counters fed from it, count every deferral the jobs record "except
// those of a claim or a sweep's batch whose commit landed but whose reply
// was lost", which the worker cannot tell from a claim that failed. A
// claim takes one job of three and defers two; its commit lands and its
// reply is lost. The worker releases the job it claimed (guarantees.md,
// "A claim whose outcome is unknown"); the jobs keep the two deferrals,
// which OnDefer never hears of; the next claim defers the released job
// (the budget is spent), which it reports.
func TestAClaimWhoseReplyIsLostDoesNotReportItsDeferrals(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[lostDeferral]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[lostDeferral]{To: 1, Per: time.Minute, Key: "global"})))
		for i := range 3 {
			h.enqueue(lostDeferral{N: i})
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
		recorded := func() int {
			var n int64
			rows, err := h.store.DB().Query(ctx, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
			require.NoError(t, err)
			defer rows.Close()
			for rows.Next() {
				require.NoError(t, rows.Scan(&n))
			}
			require.NoError(t, rows.Err())
			return int(n)
		}
		seen := func() int {
			mu.Lock()
			defer mu.Unlock()
			return reported
		}

		_, err = w.Drain(ctx)
		require.ErrorIs(t, err, errConnReset, "the claim's reply was lost")
		require.Equal(t, 2, recorded(), "the lost claim's deferrals landed")
		require.Zero(t, seen(), "a claim whose reply was lost reports none of its deferrals")

		res, err := w.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, recorded(), "the next claim deferred the released job")
		require.Equal(t, 1, seen(), "it reports the deferral it made")
		require.Equal(t, 1, res.Deferred)
	})
}
