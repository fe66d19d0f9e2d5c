package jobs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

type accountJob struct{ Account string }

func (accountJob) Kind() string { return "account_job" }

// registerAccountJob registers accountJob under 10 a second per account.
func registerAccountJob(t *testing.T) *Registry {
	t.Helper()
	reg := NewRegistry()
	require.NoError(t, Register(reg, func(context.Context, *Job[accountJob]) error { return nil },
		RateLimit(ratelimit.Limit[accountJob]{To: 10, Per: time.Second, Burst: 1, Key: func(a accountJob) any { return a.Account }})))
	return reg
}

// A budget whose own override is cleared gets its scope's limit back at
// the next refresh, though all its jobs are parked (no claim would bring
// it), and the worker then forgets it: a per-account override set and
// later cleared (a premium plan that ends, an operator's temporary raise)
// leaves nothing behind for every later refresh to walk again.
func TestClearedBudgetOverridesAreHandedBackAndForgotten(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		reg := registerAccountJob(t)
		client := NewClient(testdb.Public(s), reg, ClientConfig{Clock: c})
		w, err := NewWorker(testdb.Public(s), reg, WorkerConfig{Clock: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		v, clk := w.limits, engine.HostTime(c.Now)

		const slow = "account_job/slow"
		require.NoError(t, s.SetOverride(ctx, engine.Override{Target: slow, To: 1, Per: time.Hour, Burst: 1}, c.Now()))
		for range 2 {
			_, err := client.Enqueue(ctx, accountJob{Account: "slow"})
			require.NoError(t, err)
		}
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		budget := func() engine.BudgetInfo {
			bs, err := s.ListBudgets(ctx)
			require.NoError(t, err)
			for _, b := range bs {
				if b.Name == slow {
					return b
				}
			}
			t.Fatalf("no budget %s", slow)
			return engine.BudgetInfo{}
		}
		require.Equal(t, time.Hour.Nanoseconds(), budget().IntervalNS, "charged under its own override")
		require.Equal(t, 1, budget().Parked, "its second job parked an hour ahead")
		declared := len(v.priced) - 1

		const accounts = 300
		targets := make([]string, accounts)
		for i := range targets {
			targets[i] = fmt.Sprintf("account_job/acct_%d", i)
			require.NoError(t, s.SetOverride(ctx, engine.Override{Target: targets[i], To: 20, Per: time.Second}, c.Now()))
		}
		require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		require.Equal(t, declared+1+accounts, len(v.priced), "each budget's own override is priced")

		require.NoError(t, s.ClearOverride(ctx, slow))
		for _, target := range targets {
			require.NoError(t, s.ClearOverride(ctx, target))
		}
		c.Advance(5 * time.Second)
		require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		require.Equal(t, (100 * time.Millisecond).Nanoseconds(), budget().IntervalNS, "the scope's limit handed back to the parked budget")
		for range 2 {
			c.Advance(5 * time.Second)
			require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		}
		require.Equal(t, declared, len(v.targets()), "the refresh still walks the budgets whose overrides were cleared")
		require.Equal(t, declared, len(v.priced), "the worker still remembers the budgets whose overrides were cleared")

		// Set again, it is handed to the budget again.
		require.NoError(t, s.SetOverride(ctx, engine.Override{Target: slow, To: 1, Per: time.Minute, Burst: 1}, c.Now()))
		require.NoError(t, v.refresh(ctx, s, clk, engine.DefaultHorizon))
		require.Equal(t, time.Minute.Nanoseconds(), budget().IntervalNS)
	})
}
