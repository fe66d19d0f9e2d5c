package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Review: numbers and times at their extremes. Each test fails now and
// passes once the defect it names is fixed.

type extremeArgs struct{ N int }

func (extremeArgs) Kind() string { return "review_extreme" }

// RunAt accepts any time up to the end of the year 9999, but a budget's
// times are nanoseconds since 1970 (engine.Nanos: time.UnixNano, which is
// undefined past 2262-04-11). A rate-limited job enqueued to run in 2263
// is accepted, and when the clock gets there every claim parks it (the
// budget's "now" has wrapped round to 1677), so it never runs; Explain
// then estimates its start in 1970. Either the enqueue is refused at once
// with an error, or the job runs when its time comes.
func TestReviewExtremesARateLimitedJobPast2262RunsOrIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[extremeArgs]) error {
			runs.Add(1)
			return nil
		}, jobs.RateLimit(ratelimit.Limit[extremeArgs]{To: 100, Per: time.Minute, Burst: 10, Key: "api"})))
		at := time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err := h.client.Enqueue(context.Background(), extremeArgs{}, jobs.RunAt(at))
		if err != nil {
			return // refused at enqueue, where the caller sees it: fine
		}
		h.clock.Set(at.Add(time.Second))
		res := tickAndDrain(t, h)
		require.Equal(t, int32(1), runs.Load(),
			"the enqueue was accepted, but once its time came the job was not run (drain: %+v): a quiet budget with a burst of 10 did not admit it", res)
	})
}
