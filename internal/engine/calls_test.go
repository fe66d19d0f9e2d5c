package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// collected enqueues n calls that one job collects and returns its id.
func collected(t *testing.T, s *engine.Store, key string, n int) int64 {
	t.Helper()
	var id int64
	for i := 0; i < n; i++ {
		j := job("co", "default", 0)
		j.Args = []byte(fmt.Sprintf(`{"call":%d}`, i))
		j.Coalesce = &engine.Coalesce{Key: "co/" + key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect}}
		id = enqueue(t, s, t0, j)[0]
	}
	return id
}

func calls(t *testing.T, s *engine.Store, id int64) int {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), fmt.Sprintf("SELECT count(*) FROM sluice_calls WHERE job_id = %d", id))
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var n int
	require.NoError(t, rows.Scan(&n))
	return n
}

// A completed job's collected calls go with it: at once when completed jobs
// are deleted as they complete, and with the job when the cleaner deletes
// it later. Another job's calls stay.
func TestACompletedJobsCallsAreDeletedWithIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		a := collected(t, s, "a", 3)
		b := collected(t, s, "b", 2)
		// The first call's args are the job's; the others wait in rows.
		require.Equal(t, 2, calls(t, s, a))
		require.Equal(t, 1, calls(t, s, b))
		res := claim(t, s, pid, t0, 10)
		require.ElementsMatch(t, []int64{a, b}, ids(res.Jobs))
		for _, j := range res.Jobs {
			require.Len(t, j.CallArgs, map[int64]int{a: 3, b: 2}[j.ID], "every call reaches the handler")
		}

		s.DeleteOnComplete = true
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, a), WithCalls: runs(t, s, a)}))
		require.Zero(t, calls(t, s, a), "deleted as it completed")
		require.Equal(t, 1, calls(t, s, b), "another job's calls stay")

		s.DeleteOnComplete = false
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, b), WithCalls: runs(t, s, b)}))
		require.Equal(t, 1, calls(t, s, b), "kept while the job is kept")
		n, err := s.DeleteFinished(ctx, t0.Add(time.Hour), 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Zero(t, calls(t, s, b), "deleted with the job by the cleaner")
	})
}
