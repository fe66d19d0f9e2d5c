package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/fairness.md, "Pruning": "Such a key's next job starts at the
// virtual time whether its row is there or not", "The prune changes no
// virtual time, and no start", its exceptions all a virtual time that
// goes back; and fair_prune.go's PruneFairKeys: "This changes no virtual
// time, and no start while the virtual time does not go back below a
// deleted key's finish".
//
// No retry here. Key c's jobs are delayed a minute (starts 0..9, c's
// finish 10) while a's run; the level's virtual time, the head of the
// *ready* fair jobs, moves to 20, and the hourly prune used to delete c's
// row (10 < 20). When c's jobs come due they are ready with starts 0..9:
// the virtual time goes back to 0, and c's next job started at 0 instead
// of after its own finish (10): it jumped its own ten-job backlog. A key
// whose job waits now keeps its row. The same test without the prune
// passed on every database (checked by replacing the PruneFairKeys call):
// the prune was what moved the start.
func TestPruningAFairKeyWhoseJobsAreDelayedChangesNoStart(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		many := func(key string, n int, runAt time.Time) []int64 {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = fairJob(key, 1)
				jobs[i].RunAt = runAt
			}
			return enqueue(t, s, t0, jobs...)
		}
		claimIDs := func(now time.Time, max int) []int64 {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: max, Clock: engine.At(now), Fair: true})
			require.NoError(t, err)
			return ids(res.Jobs)
		}
		many("a", 50, time.Time{})
		cOld := many("c", 10, at(time.Minute))
		require.Len(t, claimIDs(t0, 20), 20, "a's first 20 jobs")
		n, err := s.PruneFairKeys(ctx)
		require.NoError(t, err)
		t.Logf("pruned %d keys", n)
		_, _, err = s.Promote(ctx, engine.At(at(time.Minute)), 100)
		require.NoError(t, err)
		cNew := many("c", 1, time.Time{})
		// c's jobs come due with starts 0..9, ahead of a's (20 on): the next
		// ten claims are c's old jobs, and its new one comes after them.
		got := claimIDs(at(time.Minute), 10)
		require.ElementsMatch(t, cOld, got, "c's backlog first; c's new job (%d) must not jump it", cNew[0])
	})
}

// behindAWaitingJob enqueues, on a fair rig, key old's job delayed a day
// (start 0), then one job each of keys k00 to k19, each claimed before the
// next comes (k00 starts at 0, k19 at 19: the level's virtual time rises
// past the waiting job's start, since each key that ran has no job
// waiting), and after k02, three jobs of c delayed a day (starts 3 to 5).
// With prune, it prunes, and checks what it deleted: the keys behind the
// 16 latest finishes the virtual time looks at (k05 to k19 and c), but
// not old and c, whose jobs wait.
func behindAWaitingJob(t *testing.T, s *engine.Store, prune bool) *fairRig {
	t.Helper()
	r := newFairRig(t, s)
	r.add("old", 1, 1, delayedADay)
	for i := range 20 {
		r.add(fmt.Sprintf("k%02d", i), 1, 1, nil)
		require.Len(t, r.claim(1), 1)
		if i == 2 {
			r.add("c", 1, 3, delayedADay)
		}
	}
	if prune {
		n, err := s.PruneFairKeys(context.Background())
		require.NoError(t, err)
		require.Equal(t, 5, n, "k00 to k04")
		kept := []string{"c"}
		for i := 5; i < 20; i++ {
			kept = append(kept, fmt.Sprintf("k%02d", i))
		}
		require.Equal(t, append(kept, "old"), fairKeys(t, s))
	}
	return r
}

// delayedADay delays a job a day past t0.
func delayedADay(j *engine.NewJob) { j.RunAt = at(24 * time.Hour) }

// docs/fairness.md, Pruning: the keys the level's virtual time is not read
// from are pruned while an older fair job waits (behindAWaitingJob), and
// this changes no start while that job waits and a key the virtual time
// looks at has none waiting: half of those keys then get a delayed job,
// new and pruned keys come and run, and every job starts as it does
// without the prune.
func TestFairPruneBehindAWaitingJobChangesNoStart(t *testing.T) {
	run := func(t *testing.T, s *engine.Store, prune bool) []int64 {
		r := behindAWaitingJob(t, s, prune)
		var after []int64
		for i := 5; i < 13; i++ {
			after = append(after, r.add(fmt.Sprintf("k%02d", i), 1, 1, delayedADay)...)
		}
		after = append(after, r.add("new", 1, 2, nil)...)
		after = append(after, r.add("k00", 1, 2, nil)...)
		after = append(after, r.add("c", 1, 1, nil)...)
		r.claim(100)
		r.now = at(time.Hour)
		after = append(after, r.add("late", 1, 1, nil)...)
		after = append(after, r.add("k01", 1, 1, nil)...)
		return startsOf(t, s, after)
	}
	pruneChangesNoStart(t, run)
}

// docs/fairness.md, Pruning: a key pruned while an older fair job of its
// level waits comes back as a new key. When that job is ready again, its
// old start is the level's virtual time until it is claimed, and the
// pruned key starts there, as a new key does, instead of at its old
// finish.
func TestAFairKeyPrunedBehindAWaitingJobComesBackAsANewKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := behindAWaitingJob(t, s, true)
		r.now = at(24 * time.Hour)
		_, _, err := s.Promote(context.Background(), engine.At(r.now), 100)
		require.NoError(t, err)
		fresh := r.add("new", 1, 1, nil)[0]
		pruned := r.add("k00", 1, 1, nil)[0]
		require.Zero(t, state(t, s, fresh).FairStart, "the virtual time is old's start")
		require.Zero(t, state(t, s, pruned).FairStart, "k00 starts as new does, before its old finish (1)")
	})
}

// On a level gone idle (no fair job ready or waiting), every key's finish
// is at most the virtual time, the latest of them: the prune deletes every
// key but one with that latest finish, which the virtual time is read
// from. Without it the level would start its next keys back at 0, behind
// a job that comes back with its old start (a retry) by the whole of the
// level's past; with it, a key that comes starts as without the prune.
func TestFairPruneOfAnIdleLevelKeepsItsLatestKey(t *testing.T) {
	run := func(t *testing.T, s *engine.Store, prune bool) []int64 {
		r := newFairRig(t, s)
		r.add("a", 1, 3, nil)
		for _, k := range []string{"b", "c", "d", "e"} {
			r.add(k, 1, 1, nil)
		}
		r.claim(3) // a, b, c
		r.add("a", 1, 2, nil)
		for len(r.claim(10)) > 0 {
		}
		if prune {
			n, err := s.PruneFairKeys(context.Background())
			require.NoError(t, err)
			require.Equal(t, 4, n)
			require.Len(t, fairKeys(t, s), 1, "one key left, with the latest finish")
		}
		var after []int64
		after = append(after, r.add("new", 1, 2, nil)...)
		after = append(after, r.add("b", 1, 1, nil)...)
		return startsOf(t, s, after)
	}
	pruneChangesNoStart(t, run)
}

// startsOf reads the fair start of each job.
func startsOf(t *testing.T, s *engine.Store, ids []int64) []int64 {
	t.Helper()
	starts := make([]int64, len(ids))
	for i, id := range ids {
		starts[i] = state(t, s, id).FairStart
	}
	return starts
}

// pruneChangesNoStart runs a scenario on a fresh database of each backend
// without the prune and with it, and requires the same starts of both.
func pruneChangesNoStart(t *testing.T, run func(t *testing.T, s *engine.Store, prune bool) []int64) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			without := run(t, b.Open(t), false)
			with := run(t, b.Open(t), true)
			require.Equal(t, without, with, "pruning changed a start")
		})
	}
}
