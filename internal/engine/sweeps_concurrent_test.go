package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// TestTwoSweepsOfOneFloodBesideOperatorsAndALooserLimitLoseNothing sweeps
// one flood from two processes at once (each its own connection pool),
// while an operator cancels and retries jobs of the flood and a worker
// hands a looser limit to its budget (Reprice) part way. Afterwards every
// job is in one state, the budget counts at least its parked jobs, and
// the drain that follows runs every job not cancelled exactly once, within
// the new limit in every window and at its pace, give or take the slots
// handed out under the old one.
func TestTwoSweepsOfOneFloodBesideOperatorsAndALooserLimitLoseNothing(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) { twoSweeps(t, b) })
	}
}

func twoSweeps(t *testing.T, b testdb.Backend) {
	ctx := context.Background()
	const (
		per     = 100 * time.Millisecond
		flooded = 300
		batch   = 20
		horizon = 300 * time.Millisecond
	)
	old := limits{"f": spec(t, "f", 10, per, 5)}    // 6 per 100 ms
	looser := limits{"f": spec(t, "f", 20, per, 5)} // 16 per 100 ms
	fc := clock.NewFake(t0)
	clk := engine.HostTime(fc.Now)
	open := testdb.Opener(t, b.URL(t))
	s := open()
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	if b.Name == "sqlite" {
		open = func() *engine.Store { return s }
	}
	ids := enqueue(t, s, fc.Now(), slices.Repeat([]engine.NewJob{limited("flood", "f/x")}, flooded)...)
	pid := register(t, s, fc.Now())
	first, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Candidates: 40,
		Clock: clk, Limits: old, Horizon: horizon})
	require.NoError(t, err)
	require.Len(t, first.Overflows, 1)
	o := first.Overflows[0]
	var admitted []time.Time
	for range first.Jobs {
		admitted = append(admitted, first.DecidedAt)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	cancelled := map[int64]bool{}
	moved := 0
	for range 2 {
		ss := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				got, _, err := ss.DeferOverflow(ctx, clk, o, horizon, batch)
				if !assertNoErr(t, err) {
					return
				}
				mu.Lock()
				moved += len(got)
				mu.Unlock()
				if len(got) < batch {
					return
				}
			}
		}()
	}
	os := open()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 40 {
			id := ids[(i*37)%len(ids)]
			var err error
			if i%2 == 0 {
				_, err = os.CancelJobs(ctx, clk, []int64{id}, "")
				if err == nil {
					mu.Lock()
					cancelled[id] = true
					mu.Unlock()
				}
			} else {
				_, err = os.RetryJobs(ctx, clk, []int64{id})
			}
			if errors.Is(err, engine.ErrNotAllowed) {
				continue
			}
			if !assertNoErr(t, err) {
				return
			}
			if i == 20 {
				_, err := os.Reprice(ctx, clk, engine.Repricing{Target: "f", Params: looser["f"].Params, Horizon: horizon})
				if !assertNoErr(t, err) {
					return
				}
			}
		}
	}()
	wg.Wait()
	require.False(t, t.Failed())
	t.Logf("the sweeps moved %d jobs; %d cancelled", moved, len(cancelled))

	states := testdb.JobStates(t, s)
	total := 0
	for _, n := range states {
		total += n
	}
	require.Equal(t, flooded, total, "every job in one state: %v", states)
	require.GreaterOrEqual(t, budgetsByName(t, s)["f/x"].Parked, states["parked"], "the budget counts its parked jobs")

	// The drain, on the new limit: a dispatcher's tick and a worker's
	// claim every 5 ms of the clock.
	ran := map[int64]int{}
	for _, j := range first.Jobs {
		ran[j.ID]++
	}
	want := flooded - len(cancelled)
	start := fc.Now()
	for i := 0; len(ran) < want && i < 5000; i++ {
		fc.Advance(5 * time.Millisecond)
		_, _, err := s.Promote(ctx, clk, 500)
		require.NoError(t, err)
		_, err = s.Unpark(ctx, clk, horizon, 10, 0)
		require.NoError(t, err)
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Candidates: 20,
			Clock: clk, Limits: looser, Horizon: horizon, PromoteDue: true})
		require.NoError(t, err)
		for _, j := range res.Jobs {
			ran[j.ID]++
			require.False(t, cancelled[j.ID], "job %d was cancelled", j.ID)
			admitted = append(admitted, res.DecidedAt)
		}
	}
	took := fc.Now().Sub(start)
	require.Len(t, ran, want, "every job not cancelled ran")
	for id, n := range ran {
		require.Equal(t, 1, n, "job %d ran once", id)
	}
	// The first window holds the old burst, admitted before the change.
	require.LessOrEqual(t, ratelimit.BusiestWindow(admitted, per), 20+5)
	require.LessOrEqual(t, ratelimit.BusiestWindow(admitted[len(first.Jobs):], per), 20)
	pace := time.Duration(want-len(first.Jobs)) * per / 16
	t.Logf("drained %d jobs in %s (%s at the new pace)", want-len(first.Jobs), took, pace)
	require.LessOrEqual(t, took, pace+pace/5+horizon, "the drain keeps the new limit's pace")
}
