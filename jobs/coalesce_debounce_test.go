package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// slotHolder shares refresh's concurrency Group, to hold its slot.
type slotHolder struct{ Shop int }

func (slotHolder) Kind() string { return "slot_holder" }

// blockedDebounce registers refresh, debounced by a minute (and capped by
// maxDelay when set), on shop 1's one concurrency slot, which a
// slot_holder job takes; it returns the times the refresh handler ran.
func blockedDebounce(t *testing.T, h *harness, maxDelay time.Duration) *[]time.Time {
	var ranAt []time.Time
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error {
		ranAt = append(ranAt, h.clock.Now())
		return nil
	},
		jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Minute, MaxDelay: maxDelay}),
		jobs.ConcurrencyLimit(concurrency.Limit[refresh]{Key: byShop, Group: "shop_sync"})))
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[slotHolder]) error { return nil },
		jobs.ConcurrencyLimit(concurrency.Limit[slotHolder]{Key: func(a slotHolder) any { return a.Shop }, Group: "shop_sync"})))
	return &ranAt
}

// docs/coalesce.md: "`Debounce` | Delays the job to `Debounce` after the
// latest call (trailing edge)", for a blocked job too: a debounced job
// that came due while its concurrency slot was taken is blocked; a call
// that joins it sends it back to scheduled, Debounce after the call, and
// it takes a slot (or blocks again) only then. Before the fix the call
// left it blocked, and it ran as soon as the slot freed, in the same
// instant as the call.
func TestACallThatJoinsABlockedDebouncedJobStillDelaysItByTheDebounce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ranAt := blockedDebounce(t, h, 0)
		holder := h.enqueued(slotHolder{Shop: 1}) // ready: it takes shop 1's one slot
		require.Equal(t, engine.StateReady, holder.State)
		id := h.enqueued(refresh{Shop: 1}).ID // scheduled, a minute out
		h.clock.Advance(time.Minute)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, h.job(id).State, "due, but the slot is taken")

		latest := h.clock.Now()
		joined := h.enqueued(refresh{Shop: 1})
		require.True(t, joined.Joined)
		require.Equal(t, id, joined.ID)
		require.Equal(t, engine.StateScheduled, joined.State)
		require.Equal(t, latest.Add(time.Minute), h.job(id).RunAt)

		// The holder runs and gives its slot back; the refresh job waits
		// for its debounce, and keeps its key meanwhile.
		for i := 0; i < 3; i++ {
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(ctx)
			require.NoError(t, err)
		}
		require.Empty(t, *ranAt, "the job may not run before a minute after the latest call")
		require.Equal(t, engine.StateScheduled, h.job(id).State)
		require.True(t, h.enqueued(refresh{Shop: 1}).Joined)
		require.Equal(t, latest.Add(time.Minute), h.job(id).RunAt, "a call in the same instant moves it no further")

		h.clock.Advance(time.Minute)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []time.Time{latest.Add(time.Minute)}, *ranAt, "it ran once, a minute after the latest call")
	})
}

// A blocked debounced job that comes back due while the slot is still
// taken blocks again, and runs when the slot frees; and a call past its
// MaxDelay leaves it blocked, since it is due.
func TestABlockedDebouncedJobBlocksAgainWhenDueAndKeepsItsMaxDelay(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ranAt := blockedDebounce(t, h, 2*time.Minute)
		h.enqueued(slotHolder{Shop: 1})
		start := h.clock.Now()
		id := h.enqueued(refresh{Shop: 1}).ID
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		tick := func() {
			_, err := d.Tick(ctx)
			require.NoError(t, err)
		}
		h.clock.Advance(time.Minute)
		tick()
		require.Equal(t, engine.StateBlocked, h.job(id).State)
		require.Equal(t, engine.StateScheduled, h.enqueued(refresh{Shop: 1}).State, "a call sends it back to its debounce")
		h.clock.Advance(time.Minute) // start + 2m: due again, the slot still taken
		tick()
		require.Equal(t, engine.StateBlocked, h.job(id).State)
		res := h.enqueued(refresh{Shop: 1})
		require.True(t, res.Joined)
		require.Equal(t, engine.StateBlocked, res.State, "MaxDelay after the first call has passed: it stays due, blocked")
		require.Empty(t, *ranAt)

		// The holder finishes; its slot goes to the blocked job.
		h.drain(jobs.WorkerConfig{})
		tick()
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, []time.Time{start.Add(2 * time.Minute)}, *ranAt)
	})
}

// docs/coalesce.md: a call that joins a job parked on its rate limit does
// not move it: the job keeps its place in its budget's line and runs when
// the budget hands it a slot (its debounce had passed when it was claimed
// and parked).
func TestACallThatJoinsAParkedDebouncedJobLeavesItInItsBudgetsLine(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Minute}),
			jobs.RateLimit(ratelimit.Limit[refresh]{To: 1, Per: time.Hour, Key: "global"})))
		h.enqueued(refresh{Shop: 1})
		parked := h.enqueued(refresh{Shop: 2})
		h.clock.Advance(time.Minute)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateParked, h.job(parked.ID).State)
		res := h.enqueued(refresh{Shop: 2})
		require.True(t, res.Joined)
		require.Equal(t, engine.StateParked, res.State)
		require.Equal(t, engine.StateParked, h.job(parked.ID).State)
	})
}

// A debounced job that a call moved to scheduled is
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
