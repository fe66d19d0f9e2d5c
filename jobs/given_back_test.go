package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/rate-limits.md, "Reading sluice explain": retry_backoff is "an
// attempt failed (the last error is shown) and it waits out its backoff".
// A job a worker gave back (its kind has no handler there) spent no
// attempt and no attempt of it failed (docs/guarantees.md: "not dropped,
// and spends none of its attempts"); explain said that attempt 0 failed
// and that it waited out a retry backoff. It now says given_back; once an
// attempt of it fails on a worker that runs it, retry_backoff again.
func TestExplainOfAJobGivenBackSaysItSpentNoAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		fail := true
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error {
			if fail {
				fail = false
				return errors.New("upstream down")
			}
			return nil
		}))
		id := h.enqueue(sms{To: "a"})
		res := drainRes(t, h, jobs.NewRegistry(), jobs.WorkerConfig{}) // a worker of a version without sms
		require.Equal(t, 1, res.Snoozed, "given back")
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Zero(t, j.Attempt, "no attempt spent")

		e, err := h.client.Explain(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.ReasonGivenBack, e.Reason, e.Summary)
		require.Contains(t, e.Summary, "given back, without spending an attempt")
		require.NotContains(t, e.Summary, "attempt 0 of", "explain: %s", e.Summary)
		require.NotContains(t, e.Summary, "failed", "no attempt of the job failed; explain: %s", e.Summary)
		require.Contains(t, e.LastError, `no handler for kind "sms"`, "the last error says why")
		require.Equal(t, j.RunAt, e.EstimatedStart)

		// A worker that has the handler runs it; the attempt fails.
		h.clock.Set(j.RunAt)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		e, err = h.client.Explain(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.ReasonRetryBackoff, e.Reason, e.Summary)
		require.Contains(t, e.Summary, "after attempt 1 of 25 failed")
	})
}

// docs/coalesce.md, "Deploys that change Collect": "Adding Collect loses
// no call while the deploy rolls: the old workers give back the jobs that
// collected calls, and the new ones run them"; docs/guarantees.md: such a
// job "is given back the same way" (not dropped, no attempt spent). But
// GiveBackFor was reckoned from created_at, not from the time the job
// was given back: a job enqueued to run later than GiveBackFor after its
// enqueue (a reminder a month ahead) was failed for good by the first
// old worker that claimed it while the deploy rolled, never given back,
// though it was never claimable before and a new worker would have run it
// a moment later. GiveBackFor now counts the time the job was given back.
func TestAJobDueLongAfterItsEnqueueIsGivenBackNotFailedAtOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		oldReg, newReg := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Register(oldReg, func(context.Context, *jobs.Job[pushSKU]) error { return nil },
			jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP})))
		ran := 0
		require.NoError(t, jobs.RegisterCalls(newReg, func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { ran++; return nil },
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

		h.clock.Set(j.RunAt)
		drainWith(t, h, newReg)
		require.Equal(t, engine.StateCompleted, h.job(first.ID).State)
		require.Equal(t, 1, ran)
	})
}

// The same for a job retried with backoff for longer than GiveBackFor: a
// worker of the new version runs its attempts, which fail, for 8 days;
// then a worker of the old version, which has no handler for the kind,
// claims it. It gives it back, and does not fail it: it was never given
// back before.
func TestAJobRetriedForLongerThanGiveBackForIsGivenBackNotFailedAtOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		failing := true
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error {
			if failing {
				return errors.New("upstream down")
			}
			return nil
		}, jobs.Backoff(func(int) time.Duration { return 4 * 24 * time.Hour })))
		id := h.enqueue(email{To: "x"})
		for range 2 {
			require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
			h.clock.Set(h.job(id).RunAt)
		}
		require.GreaterOrEqual(t, h.clock.Now().Sub(h.job(id).CreatedAt), jobs.DefaultGiveBackFor)

		require.Equal(t, jobs.DrainResult{Snoozed: 1}, drainRes(t, h, jobs.NewRegistry(), jobs.WorkerConfig{}),
			"the old worker gives it back")
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State, "its last error: %s", j.LastError)
		require.Equal(t, 2, j.Attempt, "no attempt spent by the give-back")

		failing = false
		h.clock.Set(j.RunAt)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}
