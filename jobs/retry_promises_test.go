package jobs_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type flaky struct{ N int }

func (flaky) Kind() string { return "flaky" }

// docs/guarantees.md, "Retries, cancel and snooze": "An error from a
// handler retries the job after a backoff: 2^attempt seconds (2 s, 4 s,
// 8 s, … capped at a day) with ±10% jitter applied after the cap (so at
// most 26.4 h) ... After MaxAttempts ... the job is kept as failed."
// Existing tests check attempts 1 and 2 only; this walks every attempt
// past the cap, on every database.
func TestBackoffStaysWithinItsDocumentedBoundsPastTheCap(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[flaky]) error {
			return errors.New("upstream down")
		}, jobs.MaxAttempts(20)))
		id := h.enqueue(flaky{})
		for attempt := 1; attempt < 20; attempt++ {
			require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried, "attempt %d", attempt)
			j := h.job(id)
			require.Equal(t, engine.StateScheduled, j.State)
			require.Equal(t, attempt, j.Attempt)
			base := min(time.Duration(math.Pow(2, float64(attempt)))*time.Second, 24*time.Hour)
			wait := j.RunAt.Sub(h.clock.Now())
			lo, hi := time.Duration(float64(base)*0.9)-time.Microsecond, time.Duration(float64(base)*1.1)+time.Microsecond
			require.True(t, wait >= lo && wait <= hi, "attempt %d: waits %s, want %s ±10%%", attempt, wait, base)
			require.LessOrEqual(t, wait, time.Duration(26.4*float64(time.Hour))+time.Microsecond)
			h.clock.Set(j.RunAt)
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Failed)
		j := h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 20, j.Attempt)
		require.Equal(t, "upstream down", j.LastError)
	})
}

// "return jobs.Snooze(d) runs it again after d without counting the
// attempt": with MaxAttempts 1, a job snoozed any number of times, by a
// negative d (now) or the longest Duration (about 292 years, still a
// storable run_at), still has its one attempt; an operator's retry brings
// the far one back, and its one failure keeps it as failed.
func TestSnoozeByNegativeOrHugeDurationsSpendsNoAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[flaky]) error {
			runs++
			switch runs {
			case 1, 2:
				return jobs.Snooze(-time.Hour)
			case 3:
				return jobs.Snooze(time.Duration(math.MaxInt64))
			}
			return errors.New("finally failed")
		}, jobs.MaxAttempts(1)))
		id := h.enqueue(flaky{})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 3, res.Snoozed, "a negative snooze runs it again now; Drain runs until nothing is ready")
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 0, j.Attempt)
		// Rounded up to the microsecond (MaxInt64 ns ends in 807 ns): the
		// job never comes back before its snooze is over.
		require.Equal(t, h.clock.Now().Add(time.Duration(math.MaxInt64)).Truncate(time.Microsecond).Add(time.Microsecond), j.RunAt)

		_, err := h.store.RetryJobs(context.Background(), engine.At(h.clock.Now()), []int64{id})
		require.NoError(t, err)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Failed)
		j = h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "finally failed", j.LastError)
	})
}

// "return jobs.Cancel(err) discards the job now, recording err" — and a
// nil err is given a generic reason (jobs.Cancel's doc). A cancelled job
// is "removed by the cleaner"; until then an operator's retry runs it
// again with its attempts reset.
func TestCancelNilRecordsAReasonAndARetryRunsItAgain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[flaky]) error {
			runs++
			if runs == 1 {
				return jobs.Cancel(nil)
			}
			return nil
		}, jobs.MaxAttempts(1)))
		id := h.enqueue(flaky{})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Cancelled)
		j := h.job(id)
		require.Equal(t, engine.StateCancelled, j.State)
		require.Equal(t, "cancelled by its handler", j.LastError)
		require.Equal(t, h.clock.Now(), j.FinishedAt)

		moved, err := h.store.RetryJobs(context.Background(), engine.At(h.clock.Now()), []int64{id})
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: id, State: engine.StateReady}}, moved)
		require.Equal(t, 0, h.job(id).Attempt)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
	})
}
