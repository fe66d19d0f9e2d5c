package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

type reviewAccountJob struct{ Account string }

func (reviewAccountJob) Kind() string { return "review_account_job" }

// A worker's view of the limits remembers, in priced, every budget that
// ever had an override of its own, for as long as the worker runs: a
// per-account override that is set and later cleared (a premium plan that
// ends, an operator's temporary raise) leaves its entry behind, and every
// refresh (each OverrideRefresh, 5 s by default) walks and sorts them all
// again. Over weeks of accounts coming and going the map only grows.
func TestReviewResourcesClearedBudgetOverridesAreForgotten(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		reg := NewRegistry()
		require.NoError(t, Register(reg, func(context.Context, *Job[reviewAccountJob]) error { return nil },
			RateLimit(ratelimit.Limit[reviewAccountJob]{To: 10, Per: time.Second, Key: func(a reviewAccountJob) any { return a.Account }})))
		v := &limitsView{reg: reg}
		clk := engine.HostTime(c.Now)
		require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		declared := len(v.priced)

		const accounts = 300
		targets := make([]string, accounts)
		for i := range targets {
			targets[i] = fmt.Sprintf("review_account_job/acct_%d", i)
			require.NoError(t, s.SetOverride(ctx, engine.Override{Target: targets[i], To: 20, Per: time.Second}, c.Now()))
		}
		require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		require.Equal(t, declared+accounts, len(v.priced), "each budget's own override is priced")

		for _, target := range targets {
			require.NoError(t, s.ClearOverride(ctx, target))
		}
		// The first refresh after the clear hands the scope's limit back to
		// those budgets; after that nothing is left to do for them.
		for range 3 {
			c.Advance(5 * time.Second)
			require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		}
		require.Equal(t, declared, len(v.targets()), "the refresh still walks the budgets whose overrides were cleared")
		require.Equal(t, declared, len(v.priced), "the worker still remembers the budgets whose overrides were cleared")
	})
}
