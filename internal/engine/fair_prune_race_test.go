package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/fairness.md, "Pruning": the hourly clean-up "deletes the key rows
// whose finish is behind both their level's virtual time and the start of
// every fair job of the level that waits to be ready. Such a key has no
// job ready or waiting …, and its next job starts at the virtual time
// whether its row is there or not, so this changes no start"
// (TestPruningAFairKeyWhoseJobsAreDelayedChangesNoStart).
//
// The prune read the virtual time and the waiting jobs' lowest start in
// two statements, each on its own snapshot (READ COMMITTED on PostgreSQL
// and MySQL). A delayed job that another dispatcher promoted between the
// two was in neither: not ready when the virtual time was read, not
// waiting when the waiting starts were. Its key's row was deleted while
// the job was ready, and the key's next job started at the virtual time,
// now that job's own start, instead of after its key's finish: it jumped
// its own key's backlog, the very case the test above guards. The
// promotion lands here before each of the prune's statements in turn.
// (SQLite has one connection, whose transaction reads one snapshot.)
func TestAFairKeyWhoseJobIsPromotedWhileThePruneReadsIsKept(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one connection, one writer: no promotion commits in the middle of the prune")
		}
		ctx := context.Background()
		pid := register(t, s, t0)
		for at := range pruneStatements {
			when := at + 1 // each case's delayed jobs come due a minute after the last's
			emptyFairLevels(t, s)
			for range 30 {
				enqueue(t, s, t0, fairJob("a", 1))
			}
			var delayed []engine.NewJob
			for range 10 {
				j := fairJob("c", 1)
				j.RunAt = t0.Add(time.Duration(when) * time.Minute)
				delayed = append(delayed, j)
			}
			cs := enqueue(t, s, t0, delayed...) // starts 0..9, c's finish 10
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Clock: engine.At(t0), Fair: true})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 20, "a's first 20: the level's virtual time moves to 20")

			// The prune, and before its statement number at another
			// dispatcher's promotion of c's jobs, committed.
			promoteDelayed := func() {
				n, _, err := s.Promote(ctx, engine.At(t0.Add(time.Duration(when)*time.Minute)), 100)
				require.NoError(t, err)
				require.Equal(t, 10, n)
			}
			pruneWith(t, s, at, promoteDelayed)
			last := state(t, s, cs[len(cs)-1])
			require.Equal(t, engine.StateReady, last.State)

			id := enqueue(t, s, t0.Add(time.Duration(when)*time.Minute), fairJob("c", 1))[0]
			got := state(t, s, id).FairStart
			require.Greater(t, got, last.FairStart, "promoted before statement %d of the prune: c's next job starts at %d, ahead of c's ten ready jobs before it (starts up to %d): c's row was pruned while they were ready", at, got, last.FairStart)
		}
	})
}

// The same promise against an enqueue: an app's transaction enqueues ten
// jobs of c (starts 0..9) and stays open while a's jobs are claimed past
// c's finish; it commits in the middle of the prune, before each of its
// statements in turn. c's row, which the enqueue held, is not deleted
// once c's jobs are there, or c's next job would start at the virtual
// time, the first of them. (The prune's delete waited for the enqueue,
// then found c's finish, 10, behind the virtual time it had read, 20.)
func TestAFairKeyEnqueuedToWhileThePruneRunsIsKept(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: the prune waits for the app's transaction to end")
		}
		ctx := context.Background()
		pid := register(t, s, t0)
		for at := range pruneStatements {
			emptyFairLevels(t, s)
			app, err := s.DB().Begin(ctx)
			require.NoError(t, err)
			var backlog []engine.NewJob
			for range 10 {
				backlog = append(backlog, fairJob("c", 1))
			}
			res, err := s.Enqueue(ctx, app, engine.At(t0), backlog) // starts 0..9, c's finish 10
			require.NoError(t, err)
			cs := res
			for range 30 {
				enqueue(t, s, t0, fairJob("a", 1))
			}
			cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Clock: engine.At(t0), Fair: true})
			require.NoError(t, err)
			require.Len(t, cl.Jobs, 20, "a's first 20: the level's virtual time moves to 20")

			pruneWith(t, s, at, func() { require.NoError(t, app.Commit(ctx)) })
			last := state(t, s, cs[len(cs)-1].ID)
			require.Equal(t, engine.StateReady, last.State)

			id := enqueue(t, s, t0, fairJob("c", 1))[0]
			got := state(t, s, id).FairStart
			require.Greater(t, got, last.FairStart, "committed before statement %d of the prune: c's next job starts at %d, ahead of c's ten ready jobs before it (starts up to %d): c's row was pruned while they were ready", at, got, last.FairStart)
		}
	})
}

// pruneStatements bounds how many statements one level's prune runs here
// (one batch); an event set to land before a later one lands after the
// prune.
const pruneStatements = 6

// pruneWith prunes s's fairness keys, running event (another
// transaction's, committed) just before the prune's statement number at,
// or after the prune when it runs fewer.
func pruneWith(t *testing.T, s *engine.Store, at int, event func()) {
	t.Helper()
	ps, rec := testdb.Record(s)
	n, done := 0, false
	rec.Before = func(string) {
		if n == at && !done {
			done = true
			event()
		}
		n++
	}
	_, err := ps.PruneFairKeys(context.Background())
	require.NoError(t, err)
	if !done {
		event()
	}
}

// emptyFairLevels deletes every job and fairness key, so that each case of
// a test starts from new levels.
func emptyFairLevels(t *testing.T, s *engine.Store) {
	t.Helper()
	for _, q := range []string{"DELETE FROM sluice_jobs", "DELETE FROM sluice_fair_keys"} {
		_, err := s.DB().Exec(context.Background(), q)
		require.NoError(t, err)
	}
}
