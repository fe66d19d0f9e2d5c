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

// guarantees.md, "Nothing lost": an EnqueueMany is taken whole, whatever
// the number of its jobs and keys. One of 32,800 jobs, each with a
// concurrency key of its own, failed on SQLite ("too many SQL variables":
// the semaphores were locked and saved in one statement each, past the
// 32,766 parameters SQLite binds). They now go in runs a statement binds.
// The test crosses a statement's bound lowered to 100 keys (smallBatches)
// with 250 keys, and checks that each statement carried at most 100 of
// them and that the saves took three runs: locking or saving the
// semaphores in one statement fails it.
func TestAnEnqueueOfMoreConcurrencyKeysThanAStatementBindsIsTaken(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		const batch, n = 100, 250
		s, _, log := smallBatches(t, base, batch)
		js := make([]engine.NewJob, n)
		for i := range js {
			js[i] = job("a", "default", 0)
			js[i].Conc = &engine.Conc{Key: fmt.Sprintf("k/%d", i), To: 1, Duration: time.Minute}
		}
		ids, err := s.Enqueue(context.Background(), nil, engine.At(t0), js)
		require.NoError(t, err)
		require.Len(t, ids, n)
		for i, e := range ids {
			require.Equal(t, engine.StateReady, e.State, "job %d", i)
		}
		for _, keys := range log.keys("", "k/") {
			require.LessOrEqual(t, keys, batch, "a statement carried more keys than it may bind")
		}
		saves := log.keys("INSERT INTO sluice_semaphores (name, held", "k/")
		require.Equal(t, []int{100, 100, 50}, saves, "the semaphores were saved in runs")
		// Every key's slot was saved taken: one more job of a key is
		// blocked.
		for _, i := range []int{0, n / 2, n - 1} {
			more := job("a", "default", 0)
			more.Conc = &engine.Conc{Key: fmt.Sprintf("k/%d", i), To: 1, Duration: time.Minute}
			got, err := s.Enqueue(context.Background(), nil, engine.At(t0), []engine.NewJob{more})
			require.NoError(t, err)
			require.Equal(t, engine.StateBlocked, got[0].State, "key %d", i)
		}
	})
}
