package engine_test

import (
	"context"
	"strings"
	"sync"
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
// PruneFairKeys reads the virtual time and the waiting jobs' lowest start
// in two statements, each on its own snapshot (READ COMMITTED on
// PostgreSQL and MySQL). A delayed job that another dispatcher promotes
// between the two is in neither: not ready when the virtual time was read,
// not waiting when the waiting starts were. Its key's row is deleted
// while the job is ready, and the key's next job starts at the virtual
// time, now that job's own start, instead of after its key's finish: it
// jumps its own key's backlog, the very case the test above guards.
// (SQLite has one connection, whose transaction reads one snapshot.)
func TestReviewAFairKeyWhoseJobIsPromotedWhileThePruneReadsIsKept(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one connection, one writer: no promotion commits in the middle of the prune")
		}
		ctx := context.Background()
		pid := register(t, s, t0)
		for range 30 {
			enqueue(t, s, t0, fairJob("a", 1))
		}
		var delayed []engine.NewJob
		for range 10 {
			j := fairJob("c", 1)
			j.RunAt = at(time.Minute)
			delayed = append(delayed, j)
		}
		cs := enqueue(t, s, t0, delayed...) // starts 0..9, c's finish 10
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Clock: engine.At(t0), Fair: true})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 20, "a's first 20: the level's virtual time moves to 20")

		// The prune, and between its two reads another dispatcher's
		// promotion of c's job, committed.
		ps, rec := testdb.Record(s)
		var once sync.Once
		read := false
		rec.Before = func(q string) {
			if strings.Contains(q, "COALESCE") && strings.Contains(q, "fair_start") {
				read = true // the virtual time
				return
			}
			if read && strings.Contains(q, "fair_start") {
				once.Do(func() {
					n, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 100)
					require.NoError(t, err)
					require.Equal(t, 10, n)
				})
			}
		}
		_, err = ps.PruneFairKeys(ctx)
		require.NoError(t, err)
		last := state(t, s, cs[len(cs)-1])
		require.Equal(t, engine.StateReady, last.State)

		id := enqueue(t, s, at(time.Minute), fairJob("c", 1))[0]
		got := state(t, s, id).FairStart
		require.Greater(t, got, last.FairStart, "c's next job starts at %d, ahead of c's ten ready jobs before it (starts up to %d): c's row was pruned while they were ready", got, last.FairStart)
	})
}
