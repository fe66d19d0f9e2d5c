package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Review (combinations): coalescing meets a concurrency limit, a rate
// limit, fair shares and operators.

// debounced is a job of queue default that coalesces on co with a debounce
// of d (no MaxDelay) and holds a slot of conc (To 1).
func debounced(co, conc string, d time.Duration) engine.NewJob {
	j := job("k", "default", 0)
	j.Coalesce = &engine.Coalesce{Key: co, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard, Debounce: d}}
	j.Conc = &engine.Conc{Key: conc, To: 1, Duration: 3 * time.Minute}
	return j
}

// docs/concurrency.md, What is guaranteed: "every blocked job runs: no
// blocked job stays blocked while its key has a free slot for longer than
// one dispatcher tick"; docs/coalesce.md: with Debounce a call moves the
// pending job to now + Debounce, "a ready job goes back to scheduled", and
// "A job blocked on its concurrency slot goes back to scheduled too: it
// holds no slot".
//
// One concurrency key per account (To 1), one coalesce key per resource,
// debounced (no MaxDelay). Resource a's pending job comes due first and
// takes the account's slot (ready); b's is blocked. Before a worker claims
// a's (a busy or paused queue), calls on a keep coming, each within the
// debounce: a's job goes back to scheduled each time, and keeps the slot
// while it waits. b stays blocked for as long as the calls on a go on —
// here a minute, without end in general — though no job of the account
// runs, nor can: a blocked job joined by a call gives up its place (it
// holds no slot while debounced), a ready one keeps its slot.
func TestReviewADebouncedJobDoesNotHoldItsSlotWhileCallsPostponeIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		a := enqueue(t, s, t0, debounced("co/a", "acct/1", time.Second))[0]
		b := enqueue(t, s, t0, debounced("co/b", "acct/1", time.Second))[0]
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, a).State)
		require.Equal(t, engine.StateBlocked, state(t, s, b).State)

		// Calls on a every half second for a minute; the dispatcher ticks
		// every half second; a worker claims every tick.
		pid := register(t, s, t0)
		for now := at(1100 * time.Millisecond); now.Before(at(61 * time.Second)); now = now.Add(500 * time.Millisecond) {
			res, err := s.Enqueue(ctx, nil, engine.At(now), []engine.NewJob{debounced("co/a", "acct/1", time.Second)})
			require.NoError(t, err)
			require.Equal(t, a, res[0].ID)
			_, _, err = s.Promote(ctx, engine.At(now), 10)
			require.NoError(t, err)
			_, _, err = s.MaintainSemaphores(ctx, engine.At(now), 10)
			require.NoError(t, err)
			if got := claim(t, s, pid, now, 5).Jobs; len(got) > 0 {
				require.Equal(t, []int64{b}, ids(got), "only b can run: a is postponed by its calls")
				return
			}
		}
		ja, jb := state(t, s, a), state(t, s, b)
		t.Fatalf("after a minute of calls on a, b is still %s; a is %s (holds the account's slot: %v), postponed by the calls: no job of acct/1 ran or could run",
			jb.State, ja.State, ja.HoldsSlot)
	})
}
