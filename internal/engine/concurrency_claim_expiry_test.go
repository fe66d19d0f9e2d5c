package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Guards docs/concurrency.md's "Lost slots": a job is presumed lost only
// once it has run (since its claim) for Duration, however long it held
// its slot before. Job a takes key k's slot at enqueue and waits ready,
// behind a backlog, for longer than Duration; the dispatcher's upkeep
// meanwhile finds k expired with no running holder, and leaves the slot to
// a. A worker claims a just before k's next expiry: the upkeep after that
// expiry used to free a's slot a second into its run, and hand it to
// blocked job b, which ran beside a under To 1. a keeps its slot until it
// has run for Duration, and is presumed lost at the first upkeep after,
// not a Duration later.
func TestConcAHolderClaimedAfterALongWaitIsPresumedLostOnlyDurationAfterItsClaim(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("k", 1, time.Minute), concJob("k", 1, time.Minute))
		a, b := got[0], got[1]
		require.Equal(t, engine.StateBlocked, state(t, s, b).State)
		maintain := func(d time.Duration) (freed, unblocked int) {
			t.Helper()
			freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(d)), 100)
			require.NoError(t, err)
			return freed, unblocked
		}

		// Ready for two minutes: no running holder, nothing freed; the
		// upkeep stamps k (it expires again at 3m).
		freed, unblocked := maintain(2 * time.Minute)
		require.Zero(t, freed+unblocked)
		claimedAt := 2*time.Minute + 59*time.Second
		pid := register(t, s, at(claimedAt))
		require.Equal(t, []int64{a}, ids(claim(t, s, pid, at(claimedAt), 5).Jobs))

		for _, d := range []time.Duration{3*time.Minute + time.Second, claimedAt + time.Minute - time.Second, claimedAt + time.Minute} {
			freed, unblocked := maintain(d)
			require.Zero(t, freed, "a has run for %s, under Duration: its slot is not presumed lost", d-claimedAt)
			require.Zero(t, unblocked)
			require.Empty(t, ids(claim(t, s, pid, at(d), 5).Jobs), "b (%d) runs beside a under To 1", b)
		}
		require.Equal(t, engine.Micros(at(claimedAt+time.Minute)), semaphore(t, s, "k").ExpiresAt,
			"k expires as a's run reaches Duration")

		freed, unblocked = maintain(claimedAt + time.Minute + time.Second)
		require.Equal(t, 1, freed, "a has run for longer than Duration: presumed lost at the first upkeep after")
		require.Equal(t, 1, unblocked)
		require.Equal(t, []int64{b}, ids(claim(t, s, pid, at(claimedAt+time.Minute+time.Second), 5).Jobs))
	})
}

// With To 2, a key's running holders are judged each by its own claim: the
// one claimed more than Duration ago is presumed lost and loses its slot,
// which goes to the blocked job, while the one claimed recently keeps its
// (the hand-out stamps the key's activity: it expires a Duration later).
func TestConcEachRunningHolderIsPresumedLostByItsOwnClaim(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("k", 2, time.Minute), concJob("k", 2, time.Minute), concJob("k", 2, time.Minute))
		old, young, blocked := got[0], got[1], got[2]
		pid := register(t, s, t0)
		require.Equal(t, []int64{old}, ids(claim(t, s, pid, t0, 1).Jobs))
		require.Equal(t, []int64{young}, ids(claim(t, s, pid, at(90*time.Second), 1).Jobs))

		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(100*time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Equal(t, 1, unblocked, "old's slot goes to the blocked job")
		require.False(t, state(t, s, old).HoldsSlot, "old ran for 100s: presumed lost")
		require.True(t, state(t, s, young).HoldsSlot, "young ran for 10s: not lost")
		require.Equal(t, engine.StateReady, state(t, s, blocked).State)
		sem := semaphore(t, s, "k")
		require.Equal(t, 2, sem.Held)
		require.Equal(t, engine.Micros(at(160*time.Second)), sem.ExpiresAt)
	})
}

// An app's transaction enqueues job J1 of concurrency key c (To 1,
// Duration 1 minute), making c's row and taking its slot, and commits
// late: 5 minutes after (the app's request went on; the same happens to a
// job that waits ready behind a backlog for longer than Duration). J2 of
// c, enqueued then, is blocked. A worker claims J1 at once, and the
// dispatcher's next tick, a second later, found c's slot expired (its
// activity was stamped when J1 took the slot, inside the app's
// transaction, and a claim stamps none), presumed J1 lost after one second
// of running, and handed its slot to J2: two jobs of c ran at once under
// To 1. A run counts from its claim (docs/concurrency.md, "Lost slots").
func TestConcAJobWhoseSlotWasTakenInALateCommitKeepsItOnceItRuns(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		a := app()
		tx := a.begin(t)
		got, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, got[0].State)
		j1 := got[0].ID
		require.NoError(t, tx.commit(), "the app commits, 5 minutes later")
		j2 := enqueue(t, s, at(5*time.Minute), concJob("c", 1, time.Minute))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, j2).State)
		pid := register(t, s, at(5*time.Minute))
		require.Equal(t, []int64{j1}, ids(claim(t, s, pid, at(5*time.Minute), 5).Jobs))

		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(5*time.Minute+time.Second)), 100)
		require.NoError(t, err)
		running := claim(t, s, pid, at(5*time.Minute+time.Second), 5).Jobs
		require.Empty(t, ids(running), "J2 (%d) runs beside J1 under To 1", j2)
		require.Zero(t, freed, "J1 has run for a second, not its Duration: its slot is not presumed lost")
		require.Zero(t, unblocked)
	})
}
