package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/coalesce.md: "A paused rate limit (To: 0) holds the keys of the
// jobs waiting on it open for as long as it is paused: calls keep joining
// them." and rate-limits.md: "a coalescing key stays held".
func TestAPausedLimitKeepsTheCoalesceKeyOpen(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var sizes []int
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			sizes = append(sizes, len(calls))
			return nil
		},
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect}),
			jobs.RateLimit(ratelimit.Limit[pushSKU]{To: 0, Per: time.Second, Key: "global"})))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		ids := map[int64]bool{}
		n := 0
		for minute := 0; minute < 20; minute++ {
			for i := 0; i < 3; i++ {
				ids[h.enqueued(pushSKU{Shop: 1, SKU: fmt.Sprint(n)}).ID] = true
				n++
			}
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			h.clock.Advance(time.Minute)
		}
		require.Len(t, ids, 1, "every call joined the one waiting job")
		require.Empty(t, sizes)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "push_sku", To: 10, Per: time.Second}, h.clock.Now()))
		for i := 0; i < 10; i++ {
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			h.clock.Advance(time.Minute)
		}
		require.Equal(t, []int{n}, sizes, "the job ran once, with every call")
	})
}

// docs/coalesce.md: "A job that finishes without being claimed (cancelled
// by an operator, or discarded by its concurrency limit) releases its
// key." Here the job is parked on its rate limit when it is cancelled.
func TestCancellingAParkedCoalescedJobReleasesItsKey(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop}),
			jobs.RateLimit(ratelimit.Limit[refresh]{To: 1, Per: time.Hour, Key: "global"})))
		h.enqueued(refresh{Shop: 1})
		parked := h.enqueued(refresh{Shop: 2})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateParked, h.job(parked.ID).State)
		require.True(t, h.enqueued(refresh{Shop: 2}).Joined)
		_, err := h.store.CancelJobs(ctx, engine.At(h.clock.Now()), []int64{parked.ID}, "")
		require.NoError(t, err)
		again := h.enqueued(refresh{Shop: 2})
		require.False(t, again.Joined, "the cancelled job gave its key up")
		require.NotEqual(t, parked.ID, again.ID)
	})
}

// docs/coalesce.md: "Replace: the job's args become the call's. Its keys
// (rate limit, concurrency) stay as they were computed for its first
// call."
func TestReplaceKeepsTheFirstCallsRateKey(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ran []string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error { ran = append(ran, j.Args.Note); return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, OnConflict: coalesce.Replace}),
			jobs.RateLimit(ratelimit.Limit[refresh]{To: 1, Per: time.Hour, Key: func(a refresh) any { return a.Note }})))
		first := h.enqueued(refresh{Shop: 1, Note: "a"})
		require.True(t, h.enqueued(refresh{Shop: 1, Note: "b"}).Joined)
		require.Equal(t, []engine.RateKey{{Key: "refresh/a", Cost: 1}}, keysOf(t, h, first.ID))
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []string{"b"}, ran)
	})
}

// docs/coalesce.md: "With Debounce, the job moves to now + Debounce ...
// but never past MaxDelay after the first call and never earlier than the
// time its rate limit gave it."
func TestDebounceNeverMovesAJobBeforeItsRateSlot(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Second}),
			jobs.RateLimit(ratelimit.Limit[refresh]{To: 1, Per: time.Minute, Key: "global"})))
		h.enqueued(refresh{Shop: 1})
		waiting := h.enqueued(refresh{Shop: 2})
		h.clock.Advance(time.Second)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		j := h.job(waiting.ID)
		require.Equal(t, engine.StateScheduled, j.State)
		slot := j.RunAt
		require.Equal(t, t0.Add(61*time.Second), slot)
		h.clock.Advance(time.Second)
		joined := h.enqueued(refresh{Shop: 2})
		require.True(t, joined.Joined)
		require.Equal(t, slot, h.job(waiting.ID).RunAt, "not moved before its slot")
		h.clock.Set(slot.Add(-500 * time.Millisecond))
		h.enqueued(refresh{Shop: 2})
		require.Equal(t, slot.Add(500*time.Millisecond), h.job(waiting.ID).RunAt, "after its slot, trailing edge")
		h.clock.Set(slot.Add(500 * time.Millisecond))
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}

// docs/coalesce.md: "A Collect job that reaches MaxCalls releases its key
// at once, so the next call starts a new job; with OnFull: Dispatch it is
// made ready if it was waiting, and the next claim sends it back to wait
// if its rate limit says so." The waiting job here is parked; it must not
// be lost, and must run when its budget has room, with all its calls.
func TestAFullParkedJobDispatchedWaitsAgainAndRuns(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var sizes []int
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			sizes = append(sizes, len(calls))
			return nil
		},
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect, MaxCalls: 3, OnFull: coalesce.Dispatch}),
			jobs.RateLimit(ratelimit.Limit[pushSKU]{To: 1, Per: time.Hour, Key: "global"})))
		h.enqueued(pushSKU{Shop: 1, SKU: "first"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		id := h.enqueued(pushSKU{Shop: 1, SKU: "a"}).ID
		h.enqueued(pushSKU{Shop: 1, SKU: "b"})
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, engine.StateParked, h.job(id).State)
		full := h.enqueued(pushSKU{Shop: 1, SKU: "c"})
		require.Equal(t, id, full.ID)
		require.Equal(t, engine.StateReady, full.State)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran(), "its limit sends it back to wait")
		require.Contains(t, []engine.State{engine.StateParked, engine.StateScheduled}, h.job(id).State)
		next := h.enqueued(pushSKU{Shop: 1, SKU: "d"})
		require.NotEqual(t, id, next.ID, "the full job's key was released")
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		for i := 0; i < 2*60+5; i++ {
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			h.drain(jobs.WorkerConfig{})
			h.clock.Advance(time.Minute)
		}
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.Equal(t, engine.StateCompleted, h.job(next.ID).State)
		require.Equal(t, []int{1, 3, 1}, sizes)
	})
}

// docs/coalesce.md: "The key is held until a worker claims the job; a
// call after that starts a new pending job." A job waiting out a retry's
// backoff has been claimed: a call starts a new job, and neither loses
// its calls.
func TestACallWhileTheJobRetriesStartsANewJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs [][]string
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, j *jobs.Job[pushSKU], calls []pushSKU) error {
			var skus []string
			for _, c := range calls {
				skus = append(skus, c.SKU)
			}
			runs = append(runs, skus)
			if j.Attempt == 1 && skus[0] == "a" {
				return fmt.Errorf("503")
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect}),
			jobs.Backoff(func(int) time.Duration { return time.Minute })))
		first := h.enqueued(pushSKU{Shop: 1, SKU: "a"})
		h.enqueued(pushSKU{Shop: 1, SKU: "b"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		second := h.enqueued(pushSKU{Shop: 1, SKU: "c"})
		require.False(t, second.Joined)
		require.NotEqual(t, first.ID, second.ID)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		h.clock.Advance(time.Minute)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, [][]string{{"a", "b"}, {"c"}, {"a", "b"}}, runs)
	})
}

// A batch (EnqueueMany) of calls with one key: the first
// creates the job, the rest join it, and a Collect handler gets every
// call, oldest (batch order) first, even when the batch interleaves keys.
func TestABatchOfCallsWithRepeatedKeysCollectsEveryCallInOrder(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		got := map[int][]string{}
		var mu sync.Mutex
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, j *jobs.Job[pushSKU], calls []pushSKU) error {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range calls {
				got[c.Shop] = append(got[c.Shop], c.SKU)
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
		var items []jobs.Item
		for _, c := range []pushSKU{{2, "b1"}, {1, "a1"}, {2, "b2"}, {1, "a2"}, {1, "a3"}, {2, "b3"}} {
			items = append(items, jobs.Item{Args: c})
		}
		res, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		require.False(t, res[0].Joined)
		require.False(t, res[1].Joined)
		for i := 2; i < len(res); i++ {
			require.True(t, res[i].Joined, "item %d", i)
		}
		require.Equal(t, 2, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []string{"a1", "a2", "a3"}, got[1])
		require.Equal(t, []string{"b1", "b2", "b3"}, got[2])
	})
}

// A key with a NUL byte, or past 255 bytes once scoped, is
// refused at enqueue, and nothing is written: no job, no join.
func TestACoalesceKeyWithANulOrTooLongIsRefusedAndWritesNothing(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: func(a refresh) any { return a.Note }})))
		ok := h.enqueued(refresh{Note: "fine"})
		_, err := h.client.Enqueue(context.Background(), refresh{Note: "a\x00b"})
		require.Error(t, err)
		// "refresh/" is 8 bytes: 247 more make 255, 248 make 256.
		fits := h.enqueued(refresh{Note: strings.Repeat("k", 247)})
		require.False(t, fits.Joined)
		_, err = h.client.Enqueue(context.Background(), refresh{Note: strings.Repeat("k", 248)})
		require.Error(t, err)
		st, err := h.store.Stats(context.Background())
		require.NoError(t, err)
		var total int64
		for _, q := range st {
			total += q.Counts[engine.StateReady]
		}
		require.EqualValues(t, 2, total, "only the two good calls wrote jobs (ids %d, %d)", ok.ID, fits.ID)
	})
}
