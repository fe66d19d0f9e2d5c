package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// Rolling deploys, where two processes run different registries on one
// queue (from a review of declarations that change between deploys:
// commits f01d72f and 843acc3 of review-declchanges).

// drainWith runs one Drain of a fresh worker on reg and returns how many
// jobs it completed.
func drainWith(t *testing.T, h *harness, reg *jobs.Registry) int {
	t.Helper()
	return drainRes(t, h, reg, jobs.WorkerConfig{}).Completed
}

// drainRes runs one Drain of a fresh worker on reg with cfg (on the
// harness's clock) and returns its result.
func drainRes(t *testing.T, h *harness, reg *jobs.Registry, cfg jobs.WorkerConfig) jobs.DrainResult {
	t.Helper()
	cfg.Clock, cfg.Logger = h.clock, quiet()
	w, err := jobs.NewWorker(testdb.Public(h.store), reg, cfg)
	require.NoError(t, err)
	res, err := w.Drain(context.Background())
	require.NoError(t, err)
	return res
}

// A rolling deploy turns a kind's coalescing from Discard into Collect
// (and its handler into a jobs.RegisterCalls one, as Collect requires).
// docs/coalesce.md, "Kinds that share a Group": "Processes whose
// registries differ — old and new code during a deploy — can still meet on
// one key: ... no call is lost and no handler gets another kind's args";
// docs/guarantees.md: "A call that coalesces into a pending job is kept in
// that job (with Collect, every call's args)"; and Register refuses a
// collecting kind without RegisterCalls "so no call is silently left out by
// a handler that reads only j.Args".
//
// Here the kind is the same on both sides: the new version's Collect calls
// join the pending job the old version created, and the old version's
// worker — whose handler reads j.Args, as a non-collecting kind's handler
// does (Job.Calls: "For other jobs it holds Args alone") — claims it and
// completed it: the calls the new version collected were never handed to a
// handler that reads them, and nothing said so. The old worker now gives
// the job back (docs/coalesce.md, "Deploys that change Collect"), its
// attempt unspent, and the new version's worker runs every call.
func TestCallsCollectedByTheNewVersionReachAHandlerThatReadsThem(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var handled []string
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(_ context.Context, j *jobs.Job[pushSKU]) error {
			handled = append(handled, j.Args.SKU)
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP})))
		require.NoError(t, jobs.RegisterCalls(newReg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			for _, c := range calls {
				handled = append(handled, c.SKU)
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
		oldClient := jobs.NewClient(testdb.Public(h.store), oldReg, jobs.ClientConfig{Clock: h.clock})
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})
		ctx := context.Background()

		first, err := oldClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: "a"})
		require.NoError(t, err)
		for _, sku := range []string{"b", "c"} {
			res, err := newClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: sku})
			require.NoError(t, err)
			require.Equal(t, first.ID, res.ID, "the new version's call joins the pending job")
		}
		require.Zero(t, drainWith(t, h, oldReg), "an old worker claims it (the deploy is still rolling) and completes nothing")
		j := h.job(first.ID)
		require.Equal(t, engine.StateScheduled, j.State, "given back")
		require.Equal(t, 0, j.Attempt, "without spending an attempt")
		require.Empty(t, handled, "no handler that reads only j.Args ran it")
		h.clock.Advance(jobs.MaxGiveBackWait)
		drainWith(t, h, newReg)
		require.ElementsMatch(t, []string{"a", "b", "c"}, handled,
			"every call reaches a handler that reads it (job %d is %s)", first.ID, h.job(first.ID).State)
	})
}

// A rolling deploy adds a kind that may run once (jobs.MaxAttempts(1): a
// payment, say, that must never be retried after a real failure). An
// enqueuer of the new version enqueues it, and a worker still on the
// previous version, which serves the same queue but knows no such kind,
// claims it first. docs/guarantees.md promised: "A job whose kind this worker does
// not know ... is not dropped: it fails the attempt with a clear error and
// is retried with backoff, so a rolling deploy that adds a kind loses
// nothing"; and docs/rate-limits.md: a worker that claims a job of a kind it
// does not know "does not run it either, but retries it with backoff".
//
// It was not retried: the worker that has no handler spent the job's only
// attempt, and the job was failed for good without ever having run, so
// the new version's workers never saw it. The old worker now gives it back
// without spending an attempt (WorkerConfig.GiveBackFor), and the docs
// say so.
func TestAJobOfAKindAddedByARollingDeployRunsOnceTheNewWorkersClaimIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := 0
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		require.NoError(t, jobs.Register(newReg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		require.NoError(t, jobs.Register(newReg, func(context.Context, *jobs.Job[email]) error { ran++; return nil }, jobs.MaxAttempts(1)))
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})
		res, err := newClient.Enqueue(context.Background(), email{To: "x"})
		require.NoError(t, err)

		drainWith(t, h, oldReg) // an old worker claims it first
		h.clock.Advance(jobs.MaxBackoff)
		drainWith(t, h, newReg)
		j := h.job(res.ID)
		require.Equal(t, 1, ran, "the job never ran on the new version's worker: it is %s after %d attempt(s), last error %q",
			j.State, j.Attempt, j.LastError)
	})
}

// A job whose kind the worker has no handler for is given back, its
// attempt unspent (docs/guarantees.md, "Nothing lost"), each time after a
// longer wait: 2 s, 4 s, 8 s (±10%), up to MaxGiveBackWait. Its last error
// says why, and the give-back keeps no failed run: it is no attempt.
func TestAJobNoWorkerHereKnowsIsGivenBackAfterAGrowingWait(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		require.NoError(t, jobs.Declare[email](newReg, jobs.MaxAttempts(1)))
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})
		res, err := newClient.Enqueue(context.Background(), email{To: "x"})
		require.NoError(t, err)

		for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
			dr := drainRes(t, h, oldReg, jobs.WorkerConfig{})
			require.Equal(t, jobs.DrainResult{Snoozed: 1}, dr, "give-back %d: reported as a snooze", i+1)
			j := h.job(res.ID)
			require.Equal(t, engine.StateScheduled, j.State)
			require.Equal(t, 0, j.Attempt, "give-back %d spent no attempt", i+1)
			require.Contains(t, j.LastError, `kind not registered: no handler for kind "email" in worker`)
			require.Contains(t, j.LastError, "given back without spending an attempt")
			require.Contains(t, j.LastError, "it fails once given back for 168h0m0s (WorkerConfig.GiveBackFor)")
			wait := j.RunAt.Sub(h.clock.Now())
			require.InDelta(t, want, wait, float64(want/10)+float64(time.Millisecond), "give-back %d waits %s ±10%%", i+1, want)
			h.clock.Advance(wait)
		}
		kept, err := h.store.Attempts(context.Background(), res.ID)
		require.NoError(t, err)
		require.Empty(t, kept, "a give-back is no failed run")

		// The longest wait is MaxGiveBackWait, however often it was given back.
		for range 12 {
			drainRes(t, h, oldReg, jobs.WorkerConfig{})
			h.clock.Advance(h.job(res.ID).RunAt.Sub(h.clock.Now()))
		}
		drainRes(t, h, oldReg, jobs.WorkerConfig{})
		require.InDelta(t, jobs.MaxGiveBackWait, h.job(res.ID).RunAt.Sub(h.clock.Now()), float64(jobs.MaxGiveBackWait/10)+float64(time.Millisecond))
	})
}

// A job no worker can run must not loop for ever: a worker that gives it
// back once it was given back for GiveBackFor fails it for good, whatever
// attempts it has left, with the reason as its error; an operator can
// `sluice retry` it once a worker knows the kind. The time is reckoned
// from its first give-back in a row, and the schedule of their waits, at
// their shortest, must reach it too: it fails after GiveBackFor of
// give-backs at least, and not much later. Tested with the default (7
// days) and with a shorter GiveBackFor.
func TestAJobGivenBackForLongerThanGiveBackForFails(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		require.NoError(t, jobs.Declare[email](newReg))
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})
		ctx := context.Background()
		a, err := newClient.Enqueue(ctx, email{To: "a"})
		require.NoError(t, err)

		// Default: given back, every hour at last, for 7 days at least.
		times, took := giveBackUntilFailed(t, h, oldReg, jobs.WorkerConfig{}, a.ID)
		require.GreaterOrEqual(t, took, jobs.DefaultGiveBackFor, "failed after %d give-backs", times)
		require.LessOrEqual(t, took, jobs.DefaultGiveBackFor*5/4+2*jobs.MaxGiveBackWait, "failed after %d give-backs", times)
		j := h.job(a.ID)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt, "the run that failed it is its one attempt, of 25")
		require.Contains(t, j.LastError, `kind not registered: no handler for kind "email"`)
		require.Contains(t, j.LastError, "no worker ran it while it was given back for 168h0m0s (WorkerConfig.GiveBackFor")
		kept, err := h.store.Attempts(ctx, a.ID)
		require.NoError(t, err)
		require.Len(t, kept, 1, "the failure is kept as a failed run")

		// A shorter GiveBackFor: given back after 2, 4, 8, 16, 32 and 64 s
		// (±10%), failed at the next claim.
		b, err := newClient.Enqueue(ctx, email{To: "b"})
		require.NoError(t, err)
		times, took = giveBackUntilFailed(t, h, oldReg, jobs.WorkerConfig{GiveBackFor: time.Minute}, b.ID)
		require.Equal(t, 6, times)
		require.GreaterOrEqual(t, took, time.Minute)
		require.Equal(t, engine.StateFailed, h.job(b.ID).State)
	})
}

// giveBackUntilFailed claims job id on workers of reg as soon as it is due
// until one fails it, and returns how many times it was given back and
// how long it was given back for: from its first claim to the last.
func giveBackUntilFailed(t *testing.T, h *harness, reg *jobs.Registry, cfg jobs.WorkerConfig, id int64) (int, time.Duration) {
	t.Helper()
	start := h.clock.Now()
	for times := 0; ; times++ {
		res := drainRes(t, h, reg, cfg)
		j := h.job(id)
		if j.State == engine.StateFailed {
			require.Equal(t, jobs.DrainResult{Failed: 1}, res)
			return times, h.clock.Now().Sub(start)
		}
		require.Equal(t, jobs.DrainResult{Snoozed: 1}, res, "give-back %d", times+1)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Less(t, times, 1000, "given back for ever")
		h.clock.Set(j.RunAt)
	}
}

// A job given back holds no concurrency slot while it waits for a worker
// that can run it: a kind added by a deploy whose concurrency Group old
// kinds share must not hold the group's key from the jobs the old workers
// run (for as long as GiveBackFor, at worst). It takes a slot again when
// it comes due, or is blocked, as a job an upstream's 429 sent back does.
func TestAJobGivenBackGivesItsConcurrencySlotBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		ranOld, ranNew := 0, 0
		limitN := jobs.ConcurrencyLimit(concurrency.Limit[noop]{Key: "acct", Group: "acct"})
		limitE := jobs.ConcurrencyLimit(concurrency.Limit[email]{Key: "acct", Group: "acct"})
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[noop]) error { ranOld++; return nil }, limitN))
		require.NoError(t, jobs.Register(newReg, func(context.Context, *jobs.Job[noop]) error { ranNew++; return nil }, limitN))
		require.NoError(t, jobs.Register(newReg, func(context.Context, *jobs.Job[email]) error { ranNew++; return nil }, limitE))
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})
		ctx := context.Background()
		e, err := newClient.Enqueue(ctx, email{To: "x"})
		require.NoError(t, err)
		n, err := newClient.Enqueue(ctx, noop{N: 1})
		require.NoError(t, err)
		require.True(t, h.job(e.ID).HoldsSlot)
		require.Equal(t, engine.StateBlocked, h.job(n.ID).State, "the group's one slot is e's")

		res := drainRes(t, h, oldReg, jobs.WorkerConfig{})
		require.Equal(t, jobs.DrainResult{Completed: 1, Snoozed: 1}, res, "e given back, and n, which got its slot, ran on the old worker")
		require.Equal(t, 1, ranOld)
		j := h.job(e.ID)
		require.Equal(t, engine.StateScheduled, j.State)
		require.False(t, j.HoldsSlot, "e holds no slot while it waits")

		// Another noop takes the free slot; e, due, is blocked behind it,
		// and runs on a new worker once the slot is given back.
		m, err := newClient.Enqueue(ctx, noop{N: 2})
		require.NoError(t, err)
		require.True(t, h.job(m.ID).HoldsSlot)
		h.clock.Advance(jobs.MaxGiveBackWait)
		res = drainRes(t, h, newReg, jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed)
		require.Equal(t, 2, ranNew)
		require.Equal(t, engine.StateCompleted, h.job(e.ID).State)
	})
}

// A deploy removes Collect from a kind (its handler becomes a plain
// jobs.Register one) while a job already holds collected calls. A worker
// of the new version would read only j.Args of it: it gives the job back,
// its attempt unspent, with an error that names the kind and the calls,
// and an old worker (the deploy still rolling) runs every call. Once no
// worker can, the job fails after GiveBackFor with its calls kept, so an
// operator can run them (docs/coalesce.md, "Deploys that change Collect").
func TestAJobHoldingCallsIsGivenBackByAWorkerWhoseHandlerReadsOnlyArgs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var handled []string
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.RegisterCalls(oldReg, func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			for _, c := range calls {
				handled = append(handled, c.SKU)
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
		newHandled := 0
		require.NoError(t, jobs.Register(newReg, func(_ context.Context, j *jobs.Job[pushSKU]) error {
			newHandled++
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP})))
		oldClient := jobs.NewClient(testdb.Public(h.store), oldReg, jobs.ClientConfig{Clock: h.clock})
		ctx := context.Background()
		var id int64
		for _, sku := range []string{"a", "b", "c"} {
			res, err := oldClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: sku})
			require.NoError(t, err)
			id = res.ID
		}
		// A job of one call runs on the new worker as any other.
		single, err := oldClient.Enqueue(ctx, pushSKU{Shop: 2, SKU: "z"})
		require.NoError(t, err)

		res := drainRes(t, h, newReg, jobs.WorkerConfig{Name: "new"})
		require.Equal(t, jobs.DrainResult{Completed: 1, Snoozed: 1}, res)
		require.Equal(t, 1, newHandled, "only the job of one call ran on the new worker")
		require.Equal(t, engine.StateCompleted, h.job(single.ID).State)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State, "given back")
		require.Equal(t, 0, j.Attempt, "its attempt unspent")
		require.Contains(t, j.LastError, `kind "push_sku": its handler in worker "new" is registered with jobs.Register, which reads only j.Args, but the job holds 3 collected calls`)

		h.clock.Advance(jobs.MaxGiveBackWait)
		drainWith(t, h, oldReg)
		require.Equal(t, []string{"a", "b", "c"}, handled, "the old worker, still running, ran every call")
		require.Equal(t, engine.StateCompleted, h.job(id).State)

		// Once the deploy is done, no worker reads the calls: the job
		// fails after GiveBackFor, its calls kept with it.
		for _, sku := range []string{"d", "e"} {
			res, err := oldClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: sku})
			require.NoError(t, err)
			id = res.ID
		}
		_, took := giveBackUntilFailed(t, h, newReg, jobs.WorkerConfig{GiveBackFor: time.Hour}, id)
		require.GreaterOrEqual(t, took, time.Hour)
		j = h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 2, j.Calls, "its calls are kept")
		require.Contains(t, j.LastError, "holds 2 collected calls")
		require.Equal(t, 1, newHandled, "the handler that reads only j.Args never ran it")
	})
}
