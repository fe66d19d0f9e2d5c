package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// docs/guarantees.md: a due job that needs a slot of a key another
// transaction holds is left due, and "the others, unlimited ones too, are
// promoted at once". A promotion takes its batch of due jobs soonest first
// (LockDue); it used to leave the held keys' jobs of the batch due and
// stop, so the next promotion took the same batch and left it again: a
// batch's worth of due jobs of keys an app's open transaction holds (jobs
// scheduled for one time, one customer's retries) stood in front of every
// job due after them for as long as the transaction stayed open. A
// promotion whose batch left jobs due now takes the jobs due after them,
// passing over the held keys' jobs, within the same call. Here the app
// holds two keys, c and d, each with a batch's worth (2) of due jobs, and
// u is due after them: each promotion promotes u (and counts only it),
// and once the app's transaction ends c's and d's jobs are promoted as
// any (blocked: the app's jobs took the slots).
func TestDueJobsOfAHeldKeyHoldBackNoJobDueAfterThem(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		var jobs []engine.NewJob
		for _, key := range []string{"c", "c", "d", "d"} {
			j := concJob(key, 1, time.Minute)
			j.RunAt = at(time.Hour)
			jobs = append(jobs, j)
		}
		u := job("k", "default", 0)
		u.RunAt = at(time.Hour + time.Second)
		v := job("k", "default", 0)
		v.RunAt = at(time.Hour + 2*time.Second)
		ids := enqueue(t, s, t0, append(jobs, u, v)...)

		a := app()
		tx := a.begin(t)
		_, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(time.Hour)),
			[]engine.NewJob{concJob("c", 1, time.Minute), concJob("d", 1, time.Minute)})
		require.NoError(t, err)

		var promoted []int
		returned, err := returnsWhileOpen(t, func() error {
			for tick := range 2 {
				n, _, err := s.Promote(ctx, engine.At(at(time.Hour+time.Duration(2+tick)*time.Second)), 2)
				if err != nil {
					return err
				}
				promoted = append(promoted, n)
			}
			return nil
		}, func() { require.NoError(t, tx.commit()) })
		require.NoError(t, err)
		require.True(t, returned, "the promotions waited for the app's transaction")
		require.Equal(t, []int{2, 0}, promoted, "u and v, past the held keys' jobs; the jobs left are not counted")
		require.Equal(t, engine.StateReady, state(t, s, ids[4]).State, "u is promoted past c's and d's due jobs")
		require.Equal(t, engine.StateReady, state(t, s, ids[5]).State, "v too")
		for _, id := range ids[:4] {
			require.Equal(t, engine.StateScheduled, state(t, s, id).State, "c's and d's due jobs are left due")
		}

		n, _, err := s.Promote(ctx, engine.At(at(time.Hour+5*time.Second)), 500)
		require.NoError(t, err)
		require.Equal(t, 4, n, "the app committed: c's and d's jobs are promoted")
		for _, id := range ids[:4] {
			require.Equal(t, engine.StateBlocked, state(t, s, id).State, "the app's jobs hold c's and d's slots")
		}
	})
}

// The same for a worker's claim that promotes the due jobs waiting on a
// rate limit (ClaimParams.PromoteDue): it takes max(window, Max) of them,
// soonest first (LockDueWaiting), and used to leave those of a key an
// app's open transaction holds due and promote nothing else, so a
// window's worth of them stood in front of every waiting job due after
// them. Job j2 (budget k/a, concurrency key c) and w (budget k/b), both
// deferred to the same slot, j2 first; the app holds c; a claim of one
// job takes w in j2's place.
func TestAClaimsDueWaitingJobsAreNotHeldBackByAHeldKeysJobs(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, 10*time.Second, 1)}
		got := enqueue(t, s, t0, limited("k", "k/a"), concLimited("k/a", "c", 1), limited("k", "k/b"), limited("k", "k/b"))
		j1, j2, b1, w := got[0], got[1], got[2], got[3]
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 5, lim, engine.DefaultHorizon)
		require.ElementsMatch(t, []int64{j1, b1}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, j2).State, "deferred to its slot, giving c's slot back")
		require.Equal(t, engine.StateScheduled, state(t, s, w).State, "deferred to its slot")

		a := app()
		tx := a.begin(t)
		_, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)

		var claimed *engine.ClaimResult
		returned, err := returnsWhileOpen(t, func() error {
			var err error
			claimed, err = s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1,
				Clock: engine.At(at(time.Hour)), Limits: lim, PromoteDue: true})
			return err
		}, tx.rollback)
		require.NoError(t, err)
		require.True(t, returned, "the claim waited for the app's open transaction")
		require.Equal(t, []int64{w}, ids(claimed.Jobs), "w, due after j2, is promoted and claimed in its place")
		require.Equal(t, 1, claimed.Promoted, "j2 is left due, and not counted")
		require.Equal(t, engine.StateScheduled, state(t, s, j2).State)
	})
}
