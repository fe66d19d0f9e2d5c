package jobs_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// restockShop is a third kind that shares refresh's coalescing Group.
type restockShop struct {
	Shop int
	Qty  int
}

func (restockShop) Kind() string { return "restock_shop" }

// docs/coalesce.md: "A kind that collects must be registered with
// RegisterCalls, so no call is silently left out by a handler that reads
// only j.Args" and "Group | Shares keys between every kind that names it."
//
// A collecting kind and a discarding kind that name one Group: a call of
// the collecting kind joins the pending job of the other kind (the join
// applies the calling kind's rule, Collect, to a job whose handler reads
// only j.Args). The call is stored in sluice_calls, loaded and decoded at
// the claim, and then dropped: no handler ever sees it. Either
// registration refuses the mix, or every call reaches a handler.
func TestACollectingKindsCallNeverVanishesIntoAnotherKindsJobOfItsGroup(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var refreshed []refresh
		var pushed []string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			refreshed = append(refreshed, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"})))
		err := jobs.RegisterCalls(h.reg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range calls {
				pushed = append(pushed, c.SKU)
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, Group: "shop", OnConflict: coalesce.Collect}))
		if err != nil {
			return // refusing the mix at registration keeps the promise
		}
		first := h.enqueued(refresh{Shop: 1, Note: "r"})
		joined := h.enqueued(pushSKU{Shop: 1, SKU: "sku-a"})
		t.Logf("refresh job %d; push_sku call: id %d joined=%v", first.ID, joined.ID, joined.Joined)
		h.drain(jobs.WorkerConfig{})
		mu.Lock()
		defer mu.Unlock()
		t.Logf("refresh handler saw %v; push_sku handler saw %v", refreshed, pushed)
		require.Contains(t, pushed, "sku-a",
			"the push_sku call (enqueue returned id %d, joined=%v) reached no handler: it was collected into a %q job whose handler reads only j.Args",
			joined.ID, joined.Joined, "refresh")
	})
}

// docs/coalesce.md: "Replace: the job's args become the call's", and
// README "Typed jobs: args are a struct with Kind(); handlers get
// *jobs.Job[T]". With two kinds in one Group, a Replace call of kind B
// gives kind A's pending job B's args: A's handler decodes another kind's
// JSON as its own args (fields it does not know are dropped, its own are
// zero), and B's handler never runs.
func TestAReplacingCallOfAnotherKindInTheGroupNeverHandsAHandlerForeignArgs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var refreshed []refresh
		var restocked []restockShop
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			refreshed = append(refreshed, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"})))
		err := jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[restockShop]) error {
			mu.Lock()
			defer mu.Unlock()
			restocked = append(restocked, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[restockShop]{Key: func(a restockShop) any { return a.Shop }, Group: "shop", OnConflict: coalesce.Replace}))
		if err != nil {
			return // refusing the mix at registration keeps the promise
		}
		h.enqueued(refresh{Shop: 1, Note: "from the refresh call"})
		h.enqueued(restockShop{Shop: 1, Qty: 5})
		h.drain(jobs.WorkerConfig{})
		mu.Lock()
		defer mu.Unlock()
		t.Logf("refresh handler saw %+v; restock handler saw %+v", refreshed, restocked)
		for _, r := range refreshed {
			require.Equal(t, "from the refresh call", r.Note,
				"the refresh handler ran with args no refresh enqueue gave (a restock_shop call's JSON decoded as refresh)")
		}
	})
}

// probe: passes. A batch (EnqueueMany) of calls with one key: the first
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

// probe: passes. A key with a NUL byte, or past 255 bytes once scoped, is
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

// probe: passes. A debounced job that a call moved to scheduled is
// cancelled by an operator: it releases its key, and the next call starts
// a new job (docs/coalesce.md: "A job that finishes without being claimed
// (cancelled by an operator ...) releases its key").
func TestCancellingADebouncedJobReleasesItsKey(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Minute})))
		first := h.enqueued(refresh{Shop: 1})
		require.True(t, h.enqueued(refresh{Shop: 1}).Joined)
		_, err := h.store.CancelJobs(context.Background(), engine.At(h.clock.Now()), []int64{first.ID}, "operator")
		require.NoError(t, err)
		next := h.enqueued(refresh{Shop: 1})
		require.False(t, next.Joined)
		require.NotEqual(t, first.ID, next.ID)
	})
}

// slotHolder shares refresh's concurrency Group, to hold its slot.
type slotHolder struct{ Shop int }

func (slotHolder) Kind() string { return "slot_holder" }

// docs/coalesce.md: "`Debounce` | Delays the job to `Debounce` after the
// latest call (trailing edge)", and "With `Debounce`, the job moves to
// now + `Debounce` ..., but never past `MaxDelay` after the first call
// and never earlier than the time its rate limit gave it"; a blocked job
// "still holds its key".
//
// A debounced job that came due while its concurrency slot was taken is
// blocked. A call that joins it does not move it (join debounces only a
// ready or scheduled job): once the slot frees, the job runs at once, in
// the same instant as the latest call, not Debounce after it.
func TestACallThatJoinsABlockedDebouncedJobStillDelaysItByTheDebounce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ranAt []time.Time
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error {
			ranAt = append(ranAt, h.clock.Now())
			return nil
		},
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Minute}),
			jobs.ConcurrencyLimit(concurrency.Limit[refresh]{Key: byShop, Group: "shop_sync"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[slotHolder]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[slotHolder]{Key: func(a slotHolder) any { return a.Shop }, Group: "shop_sync"})))

		holder := h.enqueued(slotHolder{Shop: 1}) // ready: it takes shop 1's one slot
		require.Equal(t, engine.StateReady, holder.State)
		id := h.enqueued(refresh{Shop: 1}).ID // scheduled, a minute out
		h.clock.Advance(time.Minute)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err := d.Tick(context.Background())
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, h.job(id).State, "due, but the slot is taken")

		latest := h.clock.Now()
		joined := h.enqueued(refresh{Shop: 1})
		require.True(t, joined.Joined)
		require.Equal(t, id, joined.ID)

		// The holder runs and gives its slot back; the refresh job may
		// not run before a minute after the latest call.
		for i := 0; i < 3; i++ {
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(context.Background())
			require.NoError(t, err)
		}
		t.Logf("latest call at %s; refresh ran at %v; job now %s run_at %s", latest.Format(time.TimeOnly), ranAt, h.job(id).State, h.job(id).RunAt.Format(time.TimeOnly))
		for _, at := range ranAt {
			require.False(t, at.Before(latest.Add(time.Minute)),
				"the job ran at %s, %s after the latest call, inside its 1m debounce", at.Format(time.TimeOnly), at.Sub(latest))
		}
	})
}
