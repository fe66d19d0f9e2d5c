package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A budget whose slots have come within the horizon but whose debt holds
// its next admission past it (a tighter limit counted the debt again in
// its own intervals) can hand out no slot yet: the dispatcher moves its
// cursor to that admission, as a claim that parks does, instead of
// finding it first in line at every tick, unchanged — enough such budgets
// (limit of them a tick) kept the dispatcher from the budgets behind them,
// whose jobs were all parked and no claim would unpark, for as long as the
// debt lasted.
func TestUnparkPassesBudgetsWhoseDebtHoldsThemPastTheHorizon(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const horizon = 30 * time.Second
		lim := limits{"a": spec(t, "a", 1, 6*time.Second, 1), "b": spec(t, "b", 1, time.Minute, 1)}
		pid := register(t, s, t0)
		claimAll := func(now time.Time, key string) {
			kind := key[:1]
			enqueue(t, s, now, slices.Repeat([]engine.NewJob{limited(kind, key)}, 10)...)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Candidates: 10,
				Clock: engine.At(now), Limits: lim, Horizon: horizon})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
		}
		// a/1 and a/2 slot five jobs each (up to t0+30s) and park the
		// rest, their cursors at t0+36s; b/1, a minute apart, parks all
		// but the one it admits, its cursor at t0+61s.
		claimAll(t0, "a/1")
		claimAll(t0, "a/2")
		claimAll(at(time.Second), "b/1")
		// A tighter limit reaches the parked budgets of a: their debt now
		// holds their next admission almost an hour ahead.
		_, err := s.Reprice(ctx, engine.At(at(time.Second)), engine.Repricing{Target: "a", Params: spec(t, "a", 1, time.Hour, 1).Params, Horizon: horizon})
		require.NoError(t, err)

		// At t0+40s every cursor is within the horizon; two budgets a tick.
		now := at(40 * time.Second)
		for range 3 {
			_, err := s.Unpark(ctx, engine.At(now), horizon, 2, 0)
			require.NoError(t, err)
		}
		bs := budgetsByName(t, s)
		require.Less(t, bs["b/1"].Parked, 9, "b/1's parked jobs got slots")
		for _, k := range []string{"a/1", "a/2"} {
			require.Greater(t, bs[k].NextSlot, engine.Nanos(now.Add(horizon)), "%s's cursor moved to its next admission", k)
			require.Equal(t, 4, bs[k].Parked, "%s's jobs stay parked", k)
		}
	})
}
