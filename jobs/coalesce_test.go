package jobs_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type refresh struct {
	Shop int
	Note string
}

func (refresh) Kind() string { return "refresh" }

type pushSKU struct {
	Shop int
	SKU  string
}

func (pushSKU) Kind() string { return "push_sku" }

func byShop(a refresh) any  { return a.Shop }
func byShopP(a pushSKU) any { return a.Shop }

func (h *harness) enqueued(args jobs.Args, opts ...jobs.EnqueueOption) jobs.Enqueued {
	h.t.Helper()
	res, err := h.client.Enqueue(context.Background(), args, opts...)
	require.NoError(h.t, err)
	return res
}

func TestCallsJoinThePendingJobUntilItIsClaimed(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ran []refresh
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error { ran = append(ran, j.Args); return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop})))
		first := h.enqueued(refresh{Shop: 1, Note: "first"})
		require.False(t, first.Joined)
		second := h.enqueued(refresh{Shop: 1, Note: "second"})
		require.True(t, second.Joined)
		require.Equal(t, first.ID, second.ID, "the caller learns which job it joined")
		other := h.enqueued(refresh{Shop: 2})
		require.False(t, other.Joined)

		require.Equal(t, 2, h.drain(jobs.WorkerConfig{}).Completed)
		require.ElementsMatch(t, []refresh{{Shop: 1, Note: "first"}, {Shop: 2}}, ran, "Discard keeps the first call's args")
		after := h.enqueued(refresh{Shop: 1, Note: "after"})
		require.False(t, after.Joined, "the key is released at claim")
		require.NotEqual(t, first.ID, after.ID)
	})
}

func TestReplaceTakesTheNewestArgs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ran []string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error { ran = append(ran, j.Args.Note); return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, OnConflict: coalesce.Replace})))
		for _, n := range []string{"a", "b", "c"} {
			h.enqueued(refresh{Shop: 1, Note: n})
		}
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, []string{"c"}, ran)
	})
}

func TestCollectHandsEveryCallToTheHandlerAndRetriesThemAll(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs [][]string
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, j *jobs.Job[pushSKU], calls []pushSKU) error {
			var skus []string
			for _, c := range calls {
				skus = append(skus, c.SKU)
			}
			runs = append(runs, skus)
			if j.Attempt == 1 {
				return fmt.Errorf("bulk endpoint 503")
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect}),
			jobs.Backoff(func(int) time.Duration { return time.Second })))
		for _, sku := range []string{"a", "b", "c"} {
			h.enqueued(pushSKU{Shop: 1, SKU: sku})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		h.clock.Advance(time.Second)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, [][]string{{"a", "b", "c"}, {"a", "b", "c"}}, runs)
	})
}

func TestCollectNeedsRegisterCalls(t *testing.T) {
	err := jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[pushSKU]) error { return nil },
		jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect}))
	require.ErrorContains(t, err, "register it with jobs.RegisterCalls")
	err = jobs.RegisterCalls(jobs.NewRegistry(), func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { return nil })
	require.ErrorContains(t, err, "RegisterCalls is for kinds that Coalesce with OnConflict: Collect")
	err = jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[refresh]) error { return nil },
		jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, MaxDelay: time.Second}))
	require.ErrorContains(t, err, "Coalesce: invalid coalesce rule: MaxDelay needs Debounce")
}

func TestMaxCallsSplitsIntoNewJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var sizes []int
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			sizes = append(sizes, len(calls))
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect, MaxCalls: 10})))
		ids := map[int64]bool{}
		for i := 0; i < 25; i++ {
			ids[h.enqueued(pushSKU{Shop: 1, SKU: fmt.Sprint(i)}).ID] = true
		}
		require.Len(t, ids, 3)
		h.drain(jobs.WorkerConfig{})
		sort.Ints(sizes)
		require.Equal(t, []int{5, 10, 10}, sizes)
	})
}

func TestDebounceAndMaxDelayAreExact(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: 10 * time.Second, MaxDelay: 30 * time.Second})))
		id := h.enqueued(refresh{Shop: 1}).ID
		require.Equal(t, engine.StateScheduled, h.job(id).State)
		require.Equal(t, t0.Add(10*time.Second), h.job(id).RunAt)
		h.clock.Advance(5 * time.Second)
		h.enqueued(refresh{Shop: 1})
		require.Equal(t, t0.Add(15*time.Second), h.job(id).RunAt, "trailing edge: 10 s after the latest call")
		h.clock.Advance(3 * time.Second)
		h.enqueued(refresh{Shop: 1})
		require.Equal(t, t0.Add(18*time.Second), h.job(id).RunAt)
		// A steady stream, one call every 5 s, cannot push it past 30 s
		// after the first call.
		for i := 0; i < 4; i++ {
			h.clock.Advance(5 * time.Second)
			require.True(t, h.enqueued(refresh{Shop: 1}).Joined)
		}
		require.Equal(t, t0.Add(30*time.Second), h.job(id).RunAt, "at 28 s, capped at 30 s")
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran(), "not due before 30 s")
		h.clock.Set(t0.Add(30*time.Second - time.Microsecond))
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran())
		h.clock.Set(t0.Add(30 * time.Second))
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}

func TestAFullJobThatWaitsIsDispatchedAtOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var sizes []int
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			sizes = append(sizes, len(calls))
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect, MaxCalls: 3, OnFull: coalesce.Dispatch, Debounce: time.Hour})))
		id := h.enqueued(pushSKU{Shop: 1, SKU: "a"}).ID
		h.enqueued(pushSKU{Shop: 1, SKU: "b"})
		require.Equal(t, engine.StateScheduled, h.job(id).State)
		last := h.enqueued(pushSKU{Shop: 1, SKU: "c"})
		require.True(t, last.Joined)
		require.Equal(t, engine.StateReady, last.State, "full: made ready at once, not an hour later")
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []int{3}, sizes)
	})
}

func TestAnEnqueueThatRollsBackNeitherCreatesNorJoins(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.RegisterCalls(h.reg, func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { return nil },
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
		tx, _, rollback := callerTx(t, h.store)
		res, err := h.client.EnqueueTx(ctx, tx, pushSKU{Shop: 1, SKU: "x"})
		require.NoError(t, err)
		rollback()
		_, err = h.store.GetJob(ctx, res.ID)
		require.ErrorIs(t, err, engine.ErrNotFound, "nothing was created")

		kept := h.enqueued(pushSKU{Shop: 1, SKU: "a"})
		tx, _, rollback = callerTx(t, h.store)
		joined, err := h.client.EnqueueTx(ctx, tx, pushSKU{Shop: 1, SKU: "b"})
		require.NoError(t, err)
		require.True(t, joined.Joined)
		require.Equal(t, kept.ID, joined.ID)
		rollback()
		require.Equal(t, 1, h.job(kept.ID).Calls, "nothing was joined")
		again := h.enqueued(pushSKU{Shop: 1, SKU: "c"})
		require.Equal(t, kept.ID, again.ID)
		require.Equal(t, 2, h.job(kept.ID).Calls)
	})
}

// TestConcurrentEnqueuersShareOnePendingJobAndLoseNoCall races callers on
// their own connection pools: one pending job, every call in it.
func TestConcurrentEnqueuersShareOnePendingJobAndLoseNoCall(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			reg := jobs.NewRegistry()
			var got []pushSKU
			require.NoError(t, jobs.RegisterCalls(reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
				got = append(got, calls...)
				return nil
			}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
			open := testdb.Opener(t, url)
			s := open()
			_, err := s.MigrateUp(context.Background(), 0)
			require.NoError(t, err)
			const callers, each = 6, 20
			var mu sync.Mutex
			ids := map[int64]int{}
			var wg sync.WaitGroup
			for c := 0; c < callers; c++ {
				client := jobs.NewClient(testdb.Public(open()), reg, jobs.ClientConfig{})
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						res, err := client.Enqueue(context.Background(), pushSKU{Shop: 1, SKU: fmt.Sprintf("%d-%d", c, i)})
						if !assertNoErr(t, err) {
							return
						}
						mu.Lock()
						ids[res.ID]++
						mu.Unlock()
					}
				}(c)
			}
			wg.Wait()
			require.Len(t, ids, 1, "exactly one pending job")
			w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Logger: quiet(), Clock: clock.System()})
			require.NoError(t, err)
			res, err := w.Drain(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, res.Completed)
			require.Len(t, got, callers*each, "no call lost")
		})
	}
}

// TestOnePendingAndOneRunningPerAccountUnderOneQuota is the seed's recipe:
// calls for a shop coalesce into one pending job, one job per shop runs at
// a time, and all shops share a quota.
func TestOnePendingAndOneRunningPerAccountUnderOneQuota(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var starts []time.Time
		ran := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, h.clock.Now())
			ran[j.Args.Shop]++
			return nil
		},
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop}),
			jobs.ConcurrencyLimit(concurrency.Limit[refresh]{Key: byShop}),
			jobs.RateLimit(ratelimit.Limit[refresh]{To: 2, Per: time.Second, Burst: 2, Group: "Shopify", Key: "global"})))
		// 10 calls for each of 4 shops: one pending job per shop.
		pending := map[int64]bool{}
		for i := 0; i < 10; i++ {
			for shop := 0; shop < 4; shop++ {
				pending[h.enqueued(refresh{Shop: shop}).ID] = true
			}
		}
		require.Len(t, pending, 4)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		for step := 0; step < 20; step++ {
			h.drain(jobs.WorkerConfig{Concurrency: 10})
			_, err := d.Tick(context.Background())
			require.NoError(t, err)
			h.clock.Advance(250 * time.Millisecond)
		}
		require.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 1}, ran, "one run per shop for its 10 calls")
		require.LessOrEqual(t, ratelimit.BusiestWindow(starts, time.Second), 2, "the quota holds")
	})
}

// TestBulkCallsBatchWhileTheyWait is the seed's recipe for a bulk API:
// calls for a shop collect into its pending job, up to 100, while the job
// waits on the shop's rate limit, so batches grow as the budget runs out.
func TestBulkCallsBatchWhileTheyWait(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var sizes []int
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			sizes = append(sizes, len(calls))
			return nil
		},
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect, MaxCalls: 100}),
			jobs.RateLimit(ratelimit.Limit[pushSKU]{To: 10, Per: time.Minute, Burst: 2, Key: byShopP})))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		sent := 0
		// 5 calls a second for 60 s, against 2 requests at once and then one
		// every 6.7 s.
		for sec := 0; sec < 60; sec++ {
			for i := 0; i < 5; i++ {
				h.enqueued(pushSKU{Shop: 1, SKU: fmt.Sprint(sent)})
				sent++
			}
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(context.Background())
			require.NoError(t, err)
			h.clock.Advance(time.Second)
		}
		t.Logf("%s: request sizes %v", h.store.Dialect().Name(), sizes)
		total := 0
		for _, n := range sizes {
			require.LessOrEqual(t, n, 100)
			total += n
		}
		require.LessOrEqual(t, len(sizes), 10, "no more requests than the limit allows in a minute")
		require.Greater(t, sizes[len(sizes)-1], 5, "later batches grew while they waited")
		st, err := h.store.Stats(context.Background())
		require.NoError(t, err)
		pendingCalls := 0
		for _, j := range mustList(t, h, engine.StateScheduled) {
			pendingCalls += j.Calls
		}
		for _, j := range mustList(t, h, engine.StateReady) {
			pendingCalls += j.Calls
		}
		require.Equal(t, sent, total+pendingCalls, "every call ran or waits: %+v", st)
	})
}

func mustList(t *testing.T, h *harness, state engine.State) []*engine.JobInfo {
	t.Helper()
	js, err := h.store.ListJobs(context.Background(), engine.JobFilter{State: state, Limit: 1000})
	require.NoError(t, err)
	return js
}
