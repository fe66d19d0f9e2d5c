package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A job's life" and "Delivery": every move is one
// transaction, concurrent workers never claim the same job, and a running
// job cannot be cancelled. Claimers and an operator cancelling every job,
// each on a pool of its own (as separate processes): a job a claim
// returned is never cancelled, and a job cancelled was never returned by
// a claim.
func TestCancelsRacingClaimersOnOtherPoolsNeverCancelARunningJob(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		const n = 120
		js := make([]engine.NewJob, n)
		for i := range js {
			js[i] = job("a", "default", i%3)
		}
		all := enqueue(t, s, t0, js...)

		var mu sync.Mutex
		claimed := map[int64]int{}
		var wg sync.WaitGroup
		for w := 0; w < 3; w++ {
			p := open()
			pid := register(t, p, t0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := p.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 3, Clock: engine.At(t0)})
					if !assertNoErr(t, err) || len(res.Jobs) == 0 {
						return
					}
					mu.Lock()
					for _, j := range res.Jobs {
						claimed[j.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		op := open()
		cancelled := map[int64]bool{}
		for i := len(all) - 1; i >= 0; i-- { // from the back, to meet the claimers
			moved, err := op.CancelJobs(ctx, engine.At(t0), []int64{all[i]}, "")
			if err != nil {
				require.True(t, errors.Is(err, engine.ErrNotAllowed), "job %d: %v", all[i], err)
				require.ErrorContains(t, err, "it is running")
			}
			for _, m := range moved {
				cancelled[m.ID] = true
			}
		}
		wg.Wait()

		for _, id := range all {
			st := state(t, s, id)
			switch {
			case cancelled[id]:
				require.Zero(t, claimed[id], "job %d was cancelled and claimed", id)
				require.Equal(t, engine.StateCancelled, st.State)
			default:
				require.Equal(t, 1, claimed[id], "job %d neither cancelled nor claimed once", id)
				require.Equal(t, engine.StateRunning, st.State)
			}
		}
	})
}
