package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "When the upstream says 429": the budget is held
// back until the upstream's time and "resumes at its steady rate"; the
// wait "is capped at WorkerConfig.MaxRetryAfter (1 hour by default), so a
// broken header cannot park a budget for days". An operator who sees 429s
// tightens the limit with an override; the next claim of the budget
// converts the hold, as if it were admissions, into the new limit's
// intervals (ratelimit.Params.CarryDebt, tighter limits now scale debts
// up), and the budget is held for 600 hours instead of one.
func TestA429HoldThenATighterOverrideHoldsTheBudgetForTheWaitNotDays(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		first := true
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error {
			if first {
				first = false
				return jobs.RetryAfter(time.Hour)
			}
			return nil
		}, jobs.RateLimit(ratelimit.Limit[sms]{To: 10, Per: time.Second, Burst: 1, Key: "global"})))
		h.enqueue(sms{To: "a"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Throttled)
		held := t0.Add(time.Hour)
		require.Equal(t, held.UnixNano(), budget(t, h, "sms/global").TAT, "held for the hour asked")

		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 1, Per: time.Minute, Burst: 1}, h.clock.Now()))
		h.clock.Advance(time.Second)
		h.enqueue(sms{To: "b"})
		h.drain(jobs.WorkerConfig{}) // b is deferred, under the override
		b := budget(t, h, "sms/global")
		require.Equal(t, time.Minute.Nanoseconds(), b.IntervalNS, "charged under the override")
		require.LessOrEqual(t, b.TAT, held.Add(time.Minute).UnixNano(),
			"the upstream asked for an hour, the new limit admits one a minute; the budget is held until %s after the 429",
			time.Duration(b.TAT-t0.UnixNano()))
	})
}
