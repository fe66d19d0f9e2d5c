package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "Limits on a whole queue": "a job claimed from sms
// is admitted only when its kind's budgets and the queue's all have room."
func TestAQueueLimitAndAKindLimitBothHold(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		recSMS, smsStarts := startRecorder()
		recAll, allStarts := startRecorder()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error {
			recSMS(h.clock.Now())
			recAll(h.clock.Now())
			return nil
		}, jobs.Queue("sms"), jobs.RateLimit(ratelimit.Limit[sms]{To: 2, Per: time.Second, Key: "global"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[otp]) error { recAll(h.clock.Now()); return nil }, jobs.Queue("sms")))
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 3, Per: time.Second}))
		for i := 0; i < 12; i++ {
			h.enqueue(sms{})
			h.enqueue(otp{})
		}
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{Queues: []string{"sms"}}) }, 200, 100*time.Millisecond)
		require.Len(t, allStarts(), 24)
		require.LessOrEqual(t, ratelimit.BusiestWindow(smsStarts(), time.Second), 2, "the kind's limit")
		require.LessOrEqual(t, ratelimit.BusiestWindow(allStarts(), time.Second), 3, "the queue's limit")
	})
}

// docs/rate-limits.md, "Cost": "its slot, when it waits, is as many
// intervals wide."
func TestACostlyJobsSlotIsAsManyIntervalsWide(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[syncArgs]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[syncArgs]{To: 10, Per: 10 * time.Second, Burst: 3, Key: "global",
				Cost: func(a syncArgs) int { return max(a.Items, 1) }})))
		h.enqueue(syncArgs{Items: 3}) // spends the burst
		big := h.enqueue(syncArgs{Items: 3})
		small := h.enqueue(syncArgs{Items: 1})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		// Interval: 10 s / (10 − 3 + 1) = 1.25 s. The big job can be admitted
		// when 3 tokens are back: at 3 × 1.25 s; it holds 3 intervals.
		bj, sj := h.job(big), h.job(small)
		require.Equal(t, engine.StateScheduled, bj.State)
		require.Equal(t, t0.Add(3750*time.Millisecond), bj.RunAt)
		require.Equal(t, bj.RunAt.Add(3*1250*time.Millisecond), sj.RunAt, "the next slot is 3 intervals after the big job's")
	})
}
