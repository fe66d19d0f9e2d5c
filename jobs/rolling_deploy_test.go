package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
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
	w, err := jobs.NewWorker(testdb.Public(h.store), reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
	require.NoError(t, err)
	res, err := w.Drain(context.Background())
	require.NoError(t, err)
	return res.Completed
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
// completes it. The calls the new version collected are never handed to a
// handler that reads them, and nothing says so.
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
		drainWith(t, h, oldReg) // an old worker claims it: the deploy is still rolling
		drainWith(t, h, newReg)
		require.ElementsMatch(t, []string{"a", "b", "c"}, handled,
			"every call reaches a handler that reads it (job %d is %s)", first.ID, h.job(first.ID).State)
	})
}

// A rolling deploy adds a kind that may run once (jobs.MaxAttempts(1): a
// payment, say, that must never be retried after a real failure). An
// enqueuer of the new version enqueues it, and a worker still on the
// previous version, which serves the same queue but knows no such kind,
// claims it first. docs/guarantees.md: "A job whose kind this worker does
// not know ... is not dropped: it fails the attempt with a clear error and
// is retried with backoff, so a rolling deploy that adds a kind loses
// nothing"; docs/rate-limits.md: a worker that claims a job of a kind it
// does not know "does not run it either, but retries it with backoff".
//
// It is not retried: the worker that has no handler spends the job's only
// attempt, and the job is failed for good without ever having run, so the
// new version's workers never see it.
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
