package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A worker that dies": "Any live worker or dispatcher that
// finds a heartbeat older than 5 minutes (DeadAfter) releases that
// process's running jobs back to ready". A reap takes at most 1000 of a
// dead process's jobs; it keeps the process's row while any of its jobs
// still runs, so the next reaps release the rest at once. (It deleted the
// row with the first 1000, and the rest waited as orphans until they were
// claimed DeadAfter ago: up to a heartbeat interval longer than promised.)
func TestAReapReleasesEveryJobOfADeadProcessWithMoreThanAThousand(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		dead := register(t, s, t0) // its last heartbeat
		const n = 1001
		news := make([]engine.NewJob, n)
		for i := range news {
			news[i] = job("k", "default", 0)
		}
		enqueue(t, s, t0, news...)
		claimed := 0
		for claimed < n {
			got := len(claim(t, s, dead, at(50*time.Second), n-claimed).Jobs) // between two heartbeats
			require.NotZero(t, got)
			claimed += got
		}
		// Its heartbeat is past DeadAfter: reapers run (several rounds).
		total := 0
		for range 3 {
			released, err := s.ReapDeadProcesses(ctx, engine.At(at(5*time.Minute+time.Second)), 5*time.Minute)
			require.NoError(t, err)
			total += released
		}
		require.Equal(t, n, total, "every job of the dead process is released once its heartbeat is DeadAfter old")
	})
}
