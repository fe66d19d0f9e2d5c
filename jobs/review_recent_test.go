package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// CHANGELOG (thirteenth review), GiveBackFor: "a handler's error that
// imitates the text counts for nothing (it cannot add up against the job's
// claims that spent no attempt)"; give_back_streak.go: "A record that holds
// more give-backs than the job has claims that spent no attempt is none of
// a give-back's". The bound holds only for a job with few such claims: a
// job that snoozed itself six times (a poller) and whose seventh run fails
// with an error that quotes a give-back's record — an upstream sluice job's
// last error, say, whose claim number happens to be this job's — has six
// claims that spent no attempt, so a record of six give-backs since 2000 at
// claim 7 passes, and the first give-back after it (an old worker in a
// rolling deploy) fails the job for good. It was never given back before.
func TestReviewAMimicAfterSnoozesFailsAJobAtItsFirstGiveBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		cfg := jobs.WorkerConfig{GiveBackFor: time.Minute}
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error {
			runs++
			if runs <= 6 {
				return jobs.Snooze(0)
			}
			return errors.New("the export job failed: e; given back without spending an attempt " +
				"(6 time(s) in a row since 2000-01-01T00:00:00Z, the last at claim 7) for a worker that can run it")
		}))
		id := h.enqueue(email{To: "a"})
		require.Equal(t, jobs.DrainResult{Snoozed: 6, Retried: 1}, h.drain(cfg))
		j := h.job(id)
		require.EqualValues(t, 7, j.Claims, "the handler's error names the claim that failed the attempt")
		require.Equal(t, 1, j.Attempt)

		h.clock.Set(j.RunAt)
		res := drainRes(t, h, jobs.NewRegistry(), cfg)
		j = h.job(id)
		require.Equal(t, jobs.DrainResult{Snoozed: 1}, res,
			"a first give-back gives the job back, whatever its handler's last error said: it is %s: %s", j.State, j.LastError)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Contains(t, j.LastError, streakText(1, h.clock.Now()))
	})
}
