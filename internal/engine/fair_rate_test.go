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

// A probe of docs/fairness.md ("A fair job may carry rate limits ... a
// limit's deferrals do not spend the key's turns") beside
// docs/rate-limits.md's bound ("At most To claims in any window of length
// Per ... across any number of workers"): a fair kind whose jobs draw on
// one budget shared by every key (api/global, 10 a second, burst 3) and on
// a budget of their key (api/KEY, 4 a second, burst 2); key a floods (100
// jobs, 24 on SQLite), b, c and d have 8 each. Three workers, each on its
// own pool, claim in rounds of 50 ms of the fake clock, with the
// dispatcher's promotion and unparking between rounds.
//
// It checks: no call fails; no job is claimed twice; every job completes;
// no window of 1 s holds more than 10 admissions on api/global, nor more
// than 4 on any key's budget. (How the keys share the budget once their
// jobs park is TestParkedFairJobsComeBackInFairOrder's.)
func TestFairKeysUnderASharedRateLimitKeepTheBoundAcrossWorkers(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"api": spec(t, "api", 10, time.Second, 3), "key": spec(t, "key", 4, time.Second, 2)}
		keyOf := map[int64]string{}
		add := func(key string, n int) {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = fairJob(key, 1)
				jobs[i].RateKeys = []engine.RateKey{{Key: "api/global", Cost: 1}, {Key: "key/" + key, Cost: 1}}
			}
			for _, id := range enqueue(t, s, t0, jobs...) {
				keyOf[id] = key
			}
		}
		// SQLite's claims take its one write lock in turn, so its workers
		// cannot interleave inside a claim, and once b, c and d are done
		// (about 3 s in) the rounds drain a alone, one job every 250 ms:
		// under -race each second of that costs SQLite seconds. There a
		// floods with 24, as many as b, c and d together, which keeps it
		// on api/global beside them until they are done (four keys of 4 a
		// second want more than its 10); the other databases keep 100.
		flood := 100
		if s.Dialect().Name() == "sqlite" {
			flood = 24
		}
		add("a", flood)
		for _, k := range []string{"b", "c", "d"} {
			add(k, 8)
		}
		total := len(keyOf)

		claimers := []*engine.Store{open(), open(), open()}
		pids := make([]int64, len(claimers))
		for i, c := range claimers {
			pids[i] = register(t, c, t0)
		}
		var mu sync.Mutex
		var errs []error
		claimed := map[int64]int{}
		admits := map[string][]time.Time{}
		completed := 0
		for round := 0; round < 4000 && completed < total && len(errs) == 0; round++ {
			now := at(time.Duration(round) * 50 * time.Millisecond)
			var wg sync.WaitGroup
			for i, c := range claimers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := c.Claim(ctx, engine.ClaimParams{ProcessID: pids[i], Queues: []string{"default"}, Max: 3, Clock: engine.At(now),
						Limits: lim, Fair: true, PromoteDue: true, Horizon: 10 * time.Second})
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("claim: %w", err))
						mu.Unlock()
						return
					}
					if len(res.Jobs) == 0 {
						return
					}
					if err := c.Finish(ctx, pids[i], engine.At(now), engine.Outcomes{Completed: runsOf(res.Jobs)}); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("finish: %w", err))
						mu.Unlock()
						return
					}
					mu.Lock()
					defer mu.Unlock()
					for _, j := range res.Jobs {
						claimed[j.ID]++
						completed++
						for _, rk := range j.RateKeys {
							admits[rk.Key] = append(admits[rk.Key], res.DecidedAt)
						}
					}
				}()
			}
			wg.Wait()
			if _, _, err := s.Promote(ctx, engine.At(now), 500); err != nil {
				errs = append(errs, err)
			}
			if _, err := s.Unpark(ctx, engine.At(now), 10*time.Second, 100, 500); err != nil {
				errs = append(errs, err)
			}
		}
		require.Empty(t, errs)
		for id, n := range claimed {
			require.Equal(t, 1, n, "job %d claimed %d times", id, n)
		}
		require.Equal(t, total, completed, "every job completes")
		require.LessOrEqual(t, ratelimit.BusiestWindow(admits["api/global"], time.Second), 10, "api/global")
		for _, k := range []string{"a", "b", "c", "d"} {
			require.LessOrEqual(t, ratelimit.BusiestWindow(admits["key/"+k], time.Second), 4, "key/%s", k)
		}

	})
}
