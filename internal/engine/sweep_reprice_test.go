package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A looser limit that reaches a budget while a sweep defers its flood —
// between the sweep's read of the budget and its move of the slot cursor
// — sends the sweep's batch round again under the new limit, as a claim
// that moved the cursor does: the sweep's slots, counted in the old
// limit's intervals, would otherwise push the cursor an old interval past
// the horizon under the new limit, and the parked jobs would get no slot
// until the horizon caught up with it, not within one horizon of the
// change. (Where one writer runs at a time, SQLite, the limit reaches the
// budget after the sweep's transaction, which changes nothing here.)
func TestALimitLoosenedDuringASweepBatchKeepsTheCursorWithinTheHorizon(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const horizon = 5 * time.Minute
		old := limits{"k": spec(t, "k", 10, 10*time.Minute, 10)} // a 10-minute interval
		looser := spec(t, "k", 10, time.Minute, 1)               // 6 s
		enqueue(t, s, t0, slices.Repeat([]engine.NewJob{limited("k", "k/x")}, 30)...)
		pid := register(t, s, t0)
		first, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Candidates: 12,
			Clock: engine.At(t0), Limits: old, Horizon: horizon})
		require.NoError(t, err)
		require.Len(t, first.Jobs, 10, "the burst")
		require.Len(t, first.Overflows, 1, "the claim parked the rest of its window")
		o := first.Overflows[0]

		changed := t0.Add(6 * time.Minute) // the cursor (t0+10m) is within the horizon now
		reprice := func(rs *engine.Store) error {
			_, err := rs.Reprice(ctx, engine.At(changed), engine.Repricing{Target: "k", Params: looser.Params, Horizon: horizon})
			return err
		}
		fs, faults := testdb.WithFaults(s)
		var once sync.Once
		var during error
		interleaved := s.Dialect().Capabilities().RowLocks
		if interleaved {
			faults.Observe = func(q string, _ []any) {
				if strings.HasPrefix(strings.TrimSpace(q), "UPDATE sluice_budgets SET next_slot_ns") {
					once.Do(func() { during = reprice(s) })
				}
			}
		}
		moved, _, err := fs.DeferOverflow(ctx, engine.At(changed), o, horizon, 100)
		require.NoError(t, err)
		require.NoError(t, during)
		require.NotEmpty(t, moved)
		if !interleaved {
			require.NoError(t, reprice(s))
		}

		b := budgetsByName(t, s)["k/x"]
		require.Equal(t, looser.Params.Interval, b.IntervalNS, "charged under the new limit")
		until := engine.Nanos(changed.Add(horizon))
		require.LessOrEqual(t, b.NextSlot, until+looser.Params.Interval,
			"the cursor lies %s past the horizon", time.Duration(b.NextSlot-until))
		// The sweep and the dispatcher between them have handed the
		// horizon's slots out at the new pace.
		_, err = s.Unpark(ctx, engine.At(changed), horizon, 10, 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, testdb.JobStates(t, s)["scheduled"], 2, "jobs hold slots within one horizon of the change")
	})
}
