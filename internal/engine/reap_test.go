package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A worker that dies": "Any live worker or
// dispatcher that finds a heartbeat older than 5 minutes (DeadAfter)
// releases that process's running jobs back to ready, counting the lost
// run as an attempt"; scaling.md/operations.md: several processes run
// against one database. Two processes, on their own pools, reaping the
// same dead process at once release each of its jobs once and count one
// attempt each.
func TestTwoReapersAtOnceReleaseEachLostJobOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		other := open()
		dead := register(t, s, t0)
		const n = 60
		news := make([]engine.NewJob, n)
		for i := range news {
			news[i] = job("k", "default", 0)
		}
		ids := enqueue(t, s, t0, news...)
		require.Len(t, claim(t, s, dead, t0, n).Jobs, n)

		start := make(chan struct{})
		counts := make(chan int, 2)
		errs := make(chan error, 2)
		for _, st := range []*engine.Store{s, other} {
			go func() {
				<-start
				released, err := st.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
				counts <- released
				errs <- err
			}()
		}
		close(start)
		total := 0
		for range 2 {
			total += <-counts
			require.NoError(t, <-errs)
		}
		// A reaper that skipped the other's locked rows may leave some for
		// the next round; none is released twice.
		more, err := s.ReapDeadProcesses(ctx, engine.At(at(11*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, n, total+more, "each lost job released once")
		for _, id := range ids {
			j := state(t, s, id)
			require.Equal(t, engine.StateReady, j.State)
			require.Equal(t, 1, j.Attempt, "job %d: one lost run, one attempt", id)
		}
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Empty(t, ps, "the dead process is removed")
	})
}
