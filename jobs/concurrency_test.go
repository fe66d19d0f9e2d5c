package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type accountJob struct {
	Account int
	N       int
}

func (accountJob) Kind() string { return "account_job" }

func TestConcurrencyLimitRegistrationRules(t *testing.T) {
	h := func(context.Context, *jobs.Job[accountJob]) error { return nil }
	err := jobs.Register(jobs.NewRegistry(), h,
		jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: "a", OnConflict: concurrency.Discard}),
		jobs.RateLimit(ratelimit.Limit[accountJob]{To: 1, Per: time.Second, Key: "global"}))
	require.ErrorContains(t, err, "OnConflict: Discard cannot be combined with a RateLimit")
	err = jobs.Register(jobs.NewRegistry(), h,
		jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: "a"}),
		jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: "b"}))
	require.ErrorContains(t, err, "declared more than once")
	err = jobs.Register(jobs.NewRegistry(), h, jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: "a", To: -2}))
	require.ErrorContains(t, err, "ConcurrencyLimit: invalid concurrency limit: To is -2")
	require.NoError(t, jobs.Register(jobs.NewRegistry(), h,
		jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: "a"}),
		jobs.RateLimit(ratelimit.Limit[accountJob]{To: 1, Per: time.Second, Key: "global"})), "Block and a rate limit combine")
}

// TestNoMoreThanToJobsOfAKeyRunAtOnce runs several workers, each with its
// own connection pool, over jobs of a few keys, and records every run's
// start and end: no key ever has more than To running, and every blocked
// job runs.
func TestNoMoreThanToJobsOfAKeyRunAtOnce(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			const perKey = 12
			limits := map[int]int{0: 1, 1: 1, 2: 2, 3: 3}
			var mu sync.Mutex
			running, most := map[int]int{}, map[int]int{}
			done := make(chan struct{}, 100)
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[accountJob]) error {
				mu.Lock()
				running[j.Args.Account]++
				most[j.Args.Account] = max(most[j.Args.Account], running[j.Args.Account])
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // overlap would show
				mu.Lock()
				running[j.Args.Account]--
				mu.Unlock()
				done <- struct{}{}
				return nil
			}, jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, To: 1})))
			// Keys 2 and 3 are another kind's, with more slots.
			require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[wideJob]) error {
				mu.Lock()
				running[j.Args.Account]++
				most[j.Args.Account] = max(most[j.Args.Account], running[j.Args.Account])
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				running[j.Args.Account]--
				mu.Unlock()
				done <- struct{}{}
				return nil
			}, jobs.ConcurrencyLimit(concurrency.Limit[wideJob]{Key: func(a wideJob) any { return a.Account }, To: 3})))
			open := testdb.Opener(t, url)
			s := open()
			_, err := s.MigrateUp(context.Background(), 0)
			require.NoError(t, err)
			var items []jobs.Item
			for i := 0; i < perKey; i++ {
				for acct := range limits {
					if limits[acct] == 1 {
						items = append(items, jobs.Item{Args: accountJob{Account: acct, N: i}})
					} else {
						items = append(items, jobs.Item{Args: wideJob{Account: acct}})
					}
				}
			}
			_, err = jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{}).EnqueueMany(context.Background(), items)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				w, err := jobs.NewWorker(testdb.Public(open()), reg, jobs.WorkerConfig{Concurrency: 6, PollInterval: 10 * time.Millisecond, Logger: quiet()})
				require.NoError(t, err)
				wg.Add(1)
				go func() { defer wg.Done(); _ = w.Run(ctx) }()
			}
			d := newDispatcher(t, open(), dispatcher.Config{Interval: 50 * time.Millisecond, Logger: quiet()})
			wg.Add(1)
			go func() { defer wg.Done(); _ = d.Run(ctx) }()
			receive(t, done, len(items))
			cancel()
			wg.Wait()
			require.Equal(t, 1, most[0])
			require.Equal(t, 1, most[1])
			require.LessOrEqual(t, most[2], 3)
			require.LessOrEqual(t, most[3], 3)
			sems, err := s.ListSemaphores(context.Background())
			require.NoError(t, err)
			for _, sem := range sems {
				require.Zero(t, sem.Held, "%s: every slot came back", sem.Name)
				require.Zero(t, sem.Blocked, sem.Name)
			}
		})
	}
}

type wideJob struct{ Account int }

func (wideJob) Kind() string { return "wide_job" }

func TestADeadWorkersSlotComesBackAfterItsDuration(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ran := make(chan int, 2)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error { ran <- j.Args.N; return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, Duration: time.Minute})))
		h.enqueue(accountJob{Account: 7, N: 1})
		blocked := h.enqueue(accountJob{Account: 7, N: 2})
		require.Equal(t, engine.StateBlocked, h.job(blocked).State)
		// A process claims the first and is killed, slot and all.
		dead, err := h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		res, err := h.store.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.HostTime(h.clock.Now)})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)

		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, h.job(blocked).State)
		h.clock.Advance(time.Minute + time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, h.job(blocked).State, "the lost slot was freed and handed on")
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []int{2}, receive(t, ran, 1))
	})
}

func TestDiscardThroughTheClient(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[accountJob]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, OnConflict: concurrency.Discard})))
		first := h.enqueue(accountJob{Account: 1})
		second := h.enqueue(accountJob{Account: 1})
		other := h.enqueue(accountJob{Account: 2})
		require.Equal(t, engine.StateReady, h.job(first).State)
		require.Equal(t, engine.StateReady, h.job(other).State)
		j := h.job(second)
		require.Equal(t, engine.StateCancelled, j.State)
		require.Equal(t, "discarded: no concurrency slot free for account_job/1", j.LastError)
		require.Equal(t, 2, h.drain(jobs.WorkerConfig{}).Completed)
		third := h.enqueue(accountJob{Account: 1})
		require.Equal(t, engine.StateReady, h.job(third).State, "once the first finished, its slot is free again")
	})
}

// TestOneAtATimePerAccountUnderOneQuota is the seed's recipe: one sync at
// a time for each account, and at most 3 claims a second across all of
// them. Both limits hold, and every job runs.
func TestOneAtATimePerAccountUnderOneQuota(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var starts []time.Time
		perAccount := map[int][]time.Time{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, h.clock.Now())
			perAccount[j.Args.Account] = append(perAccount[j.Args.Account], h.clock.Now())
			return nil
		},
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }}),
			jobs.RateLimit(ratelimit.Limit[accountJob]{To: 3, Per: time.Second, Burst: 3, Group: "Stripe", Key: "global"})))
		for i := 0; i < 4; i++ {
			for acct := 0; acct < 5; acct++ {
				h.enqueue(accountJob{Account: acct, N: i})
			}
		}
		for step := 0; step < 40 && len(starts) < 20; step++ {
			h.drain(jobs.WorkerConfig{Concurrency: 20})
			d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
			_, err := d.Tick(context.Background())
			require.NoError(t, err)
			h.clock.Advance(500 * time.Millisecond)
		}
		require.Len(t, starts, 20, "every job ran")
		require.LessOrEqual(t, ratelimit.BusiestWindow(starts, time.Second), 3, "the quota holds across accounts")
		for acct, ts := range perAccount {
			require.Len(t, ts, 4, fmt.Sprint(acct))
		}
	})
}
