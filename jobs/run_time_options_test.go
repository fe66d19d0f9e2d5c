package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

type runTimeJob struct{ N int }

func (runTimeJob) Kind() string { return "run_time" }

// Delay(d) and RunAt(t) given together are refused at enqueue (and by
// Client.Check, which a dispatcher's recurring tasks run at start), with
// an error naming both, in either order and whatever their values, and
// nothing is written: neither is obviously the one meant, and RunAt used
// to win silently, so a job asked to wait an hour ran at once.
func TestDelayAndRunAtTogetherAreRefusedNamingBoth(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[runTimeJob](h.reg))
		for _, opts := range [][]jobs.EnqueueOption{
			{jobs.Delay(time.Hour), jobs.RunAt(h.clock.Now())},
			{jobs.RunAt(h.clock.Now().Add(time.Minute)), jobs.Delay(time.Hour)},
			{jobs.Delay(0), jobs.RunAt(time.Time{})},
		} {
			_, err := h.client.Enqueue(ctx, runTimeJob{}, opts...)
			require.ErrorContains(t, err, "both Delay and RunAt")
			require.ErrorContains(t, err, "run_time")
			require.ErrorContains(t, h.client.Check(jobs.Item{Args: runTimeJob{}, Options: opts}), "both Delay and RunAt")
		}
		_, err := h.client.EnqueueMany(ctx, []jobs.Item{
			{Args: runTimeJob{N: 1}, Options: []jobs.EnqueueOption{jobs.Delay(time.Hour)}},
			{Args: runTimeJob{N: 2}, Options: []jobs.EnqueueOption{jobs.Delay(time.Hour), jobs.RunAt(h.clock.Now())}},
		})
		require.ErrorContains(t, err, "item 1")
		require.ErrorContains(t, err, "both Delay and RunAt")
		require.Zero(t, countAllJobs(t, h.store), "nothing is written")

		// Either alone is taken as it says.
		d := h.job(h.enqueue(runTimeJob{N: 3}, jobs.Delay(time.Hour)))
		require.Equal(t, t0.Add(time.Hour), d.RunAt)
		r := h.job(h.enqueue(runTimeJob{N: 4}, jobs.RunAt(t0.Add(2*time.Hour))))
		require.Equal(t, t0.Add(2*time.Hour), r.RunAt)
	})
}
