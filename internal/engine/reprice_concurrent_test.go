package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// walkLimits are the limits a walk switches k between.
var walkLimits = []struct {
	to    int
	per   time.Duration
	burst int
}{{2, time.Second, 1}, {6, time.Second, 3}, {1, 2 * time.Second, 1}, {0, time.Second, 1}, {4, time.Second, 4}, {3, 500 * time.Millisecond, 2}}

// drainLimit is the limit a walk ends on, loose enough that what is left
// of its backlog drains in about 2 s of the fake clock (4 a second, the
// loosest of walkLimits, took 19 s: as many rounds again as the walk).
// Its admissions are checked like the others, under its own version,
// drainVersion, past the walk's.
var drainLimit = struct {
	to    int
	per   time.Duration
	burst int
}{20, time.Second, 5}

const drainVersion = 1000

// walkAdmission is one charge of a budget, with the version of the limit
// the claim decided under.
type walkAdmission struct {
	at      time.Time
	version int
}

// Reprice beside concurrent claims (docs/rate-limits.md, "Changing a limit"
// and "Changing a limit without a restart"): three workers, each on its own
// pool, claim from one queue whose jobs draw on one or two of four budgets
// of scope k, with backlogs parked on them, while a fourth pool reprices
// the scope whenever the limit changes (every 1.5 s of the fake clock, in
// batches of one budget, meeting the budgets the claims hold), and the
// dispatcher's promotion and unparking run between rounds. Every worker
// decides under the limit Reprice applies in that round, as after a
// refresh.
//
// Promised: no call fails (a Reprice that waits for a budget a claim
// holds, or a claim that waits for one Reprice holds, carries on); no job
// is claimed twice, and every job completes once the limit is loose; and
// under each limit no window of its Per holds more than its To on any
// budget ("At most To claims in any window of length Per", checked under
// one limit at a time, as the model test checks it).
func TestRepriceBesideConcurrentClaimsLosesNothingAndKeepsTheBound(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		keys := []string{"k/a", "k/b", "k/c", "k/d"}
		var jobs []engine.NewJob
		for i := range 120 {
			j := job("k", "default", i%3)
			a, b := keys[i%4], keys[(i/4)%4]
			j.RateKeys = []engine.RateKey{{Key: a, Cost: 1}}
			if b != a && i%3 == 0 {
				if b < a {
					a, b = b, a
				}
				j.RateKeys = []engine.RateKey{{Key: a, Cost: 1}, {Key: b, Cost: 1}}
			}
			jobs = append(jobs, j)
		}
		enqueue(t, s, t0, jobs...)
		total := len(jobs)

		claimers := []*engine.Store{open(), open(), open()}
		pids := make([]int64, len(claimers))
		for i, c := range claimers {
			pids[i] = register(t, c, t0)
		}
		repricer := open()

		var mu sync.Mutex
		claimedBy := map[int64]int{}
		admits := map[string][]walkAdmission{}
		var errs []error
		fail := func(what string, err error) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			mu.Unlock()
		}
		hints := make([][]string, len(claimers))
		limitOf := func(v int) (limits, ratelimit.Spec) {
			c := walkLimits[v%len(walkLimits)]
			if v == drainVersion {
				c = drainLimit
			}
			sp := spec(t, "k", c.to, c.per, c.burst)
			return limits{"k": sp}, sp
		}
		completed, repriced := 0, 0
		round := func(step int, v int) {
			now := at(time.Duration(step) * 100 * time.Millisecond)
			lim, sp := limitOf(v)
			var wg sync.WaitGroup
			wg.Add(len(claimers) + 1)
			go func() {
				defer wg.Done()
				n, err := repricer.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: sp.Params, Batch: 1, Horizon: 2 * time.Second})
				if err != nil {
					fail("reprice", err)
				}
				mu.Lock()
				repriced += n
				mu.Unlock()
			}()
			for i, c := range claimers {
				go func() {
					defer wg.Done()
					for n := range 2 {
						res, err := c.Claim(ctx, engine.ClaimParams{
							ProcessID: pids[i], Queues: []string{"default"}, Max: 3, Clock: engine.At(now), Limits: lim,
							Horizon: 2 * time.Second, PromoteDue: (step+i+n)%2 == 0, BudgetHint: hints[i], SnapshotHint: n == 1,
						})
						if err != nil {
							fail("claim", err)
							return
						}
						hints[i] = res.Budgets
						var done []engine.Run
						mu.Lock()
						for _, j := range res.Jobs {
							claimedBy[j.ID]++
							done = append(done, j.Run())
							for _, rk := range j.RateKeys {
								admits[rk.Key] = append(admits[rk.Key], walkAdmission{at: res.DecidedAt, version: v})
							}
						}
						mu.Unlock()
						if len(done) == 0 {
							continue
						}
						if err := c.Finish(ctx, pids[i], engine.At(now), engine.Outcomes{Completed: done}); err != nil {
							fail("finish", err)
							return
						}
						mu.Lock()
						completed += len(done)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if _, _, err := s.Promote(ctx, engine.At(now), 500); err != nil {
				fail("promote", err)
			}
			if _, err := s.Unpark(ctx, engine.At(now), 2*time.Second, 100, 500); err != nil {
				fail("unpark", err)
			}
		}
		step := 0
		for ; step < 150; step++ {
			round(step, step/15)
		}
		// Then a limit loose enough to drain the rest in a few seconds of
		// the fake clock, switched to only after the walk.
		for ; step < 2000 && func() bool { mu.Lock(); defer mu.Unlock(); return completed < total && len(errs) == 0 }(); step++ {
			round(step, drainVersion)
		}
		require.Empty(t, errs, "no call fails")
		require.Positive(t, repriced, "Reprice met parked budgets")
		t.Logf("%d budgets repriced, %d steps", repriced, step)
		for id, n := range claimedBy {
			require.Equal(t, 1, n, "job %d claimed %d times", id, n)
		}
		require.Equal(t, total, completed, "every job completes")
		for key, as := range admits {
			byVersion := map[int][]time.Time{}
			for _, a := range as {
				byVersion[a.version] = append(byVersion[a.version], a.at)
			}
			for v, times := range byVersion {
				_, sp := limitOf(v)
				require.LessOrEqual(t, ratelimit.BusiestWindow(times, sp.Per), sp.To, "budget %s under %d per %s (version %d)", key, sp.To, sp.Per, v)
			}
		}
	})
}
