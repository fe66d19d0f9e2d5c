package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// Review of today's changes (e2ee8cb..main).

// docs/rate-limits.md, "Reading sluice explain": retry_backoff is "an
// attempt failed (the last error is shown) and it waits out its backoff,
// or a snooze". A job a worker gave back (its kind has no handler there)
// spent no attempt and no attempt of it failed (docs/guarantees.md: "not
// dropped, and spends none of its attempts"); explain tells the operator
// that attempt 0 failed and that it waits out a retry backoff.
func TestReviewExplainOfAJobGivenBackSaysNoAttemptFailed(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil }))
		id := h.enqueue(sms{To: "a"})
		res := drainRes(t, h, jobs.NewRegistry(), jobs.WorkerConfig{}) // a worker of a version without sms
		require.Equal(t, 1, res.Snoozed, "given back")
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Zero(t, j.Attempt, "no attempt spent")

		e, err := h.client.Explain(ctx, id)
		require.NoError(t, err)
		require.NotContains(t, e.Summary, "attempt 0 of", "explain: %s", e.Summary)
		require.NotContains(t, e.Summary, "failed", "no attempt of the job failed; explain: %s", e.Summary)
	})
}

// docs/coalesce.md, "Deploys that change Collect": "Adding Collect loses
// no call while the deploy rolls: the old workers give back the jobs that
// collected calls, and the new ones run them"; docs/guarantees.md: such a
// job "is given back the same way" (not dropped, no attempt spent). But
// GiveBackFor is reckoned from created_at, not from the first time the
// job was given back: a job enqueued to run later than GiveBackFor after
// its enqueue (a reminder a month ahead; or one retried with backoff for
// over a week) is failed for good by the first old worker that claims
// it while the deploy rolls, never given back, though it was never
// claimable before and a new worker would have run it a moment later.
func TestReviewAJobDueLongAfterItsEnqueueIsGivenBackNotFailedAtOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[pushSKU]) error { return nil },
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP})))
		require.NoError(t, jobs.RegisterCalls(newReg, func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { return nil },
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
		oldClient := jobs.NewClient(testdb.Public(h.store), oldReg, jobs.ClientConfig{Clock: h.clock})
		newClient := jobs.NewClient(testdb.Public(h.store), newReg, jobs.ClientConfig{Clock: h.clock})

		runAt := h.clock.Now().Add(30 * 24 * time.Hour)
		first, err := oldClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: "a"}, jobs.RunAt(runAt))
		require.NoError(t, err)
		h.clock.Set(runAt.Add(-time.Minute)) // the deploy adding Collect rolls
		res, err := newClient.Enqueue(ctx, pushSKU{Shop: 1, SKU: "b"})
		require.NoError(t, err)
		require.Equal(t, first.ID, res.ID, "the new version's call joins the pending job")

		h.clock.Set(runAt)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		drainRes(t, h, oldReg, jobs.WorkerConfig{}) // an old worker claims it first
		j := h.job(first.ID)
		require.Equal(t, engine.StateScheduled, j.State,
			"given back for the new workers, which run it a moment later; it is %s: %s", j.State, j.LastError)
	})
}
