package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/fairness.md, "Pruning": "A key's next job starts at the virtual time
// whether its row is there or not, so this changes no start (the one
// exception: a retried job that comes back with an old start lowers its
// level's virtual time for a while ...)", and fair.go's PruneFairKeys:
// "while the virtual time does not go back, which only a retried job with
// an old start can make it do".
//
// No retry here. Key c's jobs are delayed a minute (starts 0..9, c's
// finish 10) while a's run; the level's virtual time, the head of the
// *ready* fair jobs, moves to 20, and the hourly prune deletes c's row
// (10 < 20). When c's jobs come due they are ready with starts 0..9: the
// virtual time goes back to 0 — a delayed (or parked, or blocked) job does
// what the doc says only a retry can. c's next job then starts at 0
// instead of after its own finish (10): it jumps its own ten-job backlog.
// The same test without the prune passes on every database (checked by
// replacing the PruneFairKeys call): the prune is what moves the start.
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
