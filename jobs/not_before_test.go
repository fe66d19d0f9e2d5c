package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/jobs"
)

type notBeforeJob struct{ N int }

func (notBeforeJob) Kind() string { return "not_before" }

// halfMicro puts a time half a microsecond into one: stored rounded down
// (microseconds), it would come 500 ns early.
const halfMicro = 500 * time.Nanosecond

// "RunAt schedules the job to run no earlier than t" (jobs/options.go).
// Run times are stored in microseconds; one with a fraction of a
// microsecond used to be rounded down, so a worker whose clock read that
// microsecond ran the job up to 999 ns before t. It is rounded up, as
// rate-limit slots always were.
func TestRunAtWithAFractionOfAMicrosecondDoesNotRunEarly(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[notBeforeJob]) error {
			runs.Add(1)
			return nil
		}))
		at := t0.Add(time.Hour + halfMicro)
		id := h.enqueue(notBeforeJob{}, jobs.RunAt(at))
		require.Equal(t, at.Add(halfMicro), h.job(id).RunAt, "stored rounded up to the microsecond")

		h.clock.Set(t0.Add(time.Hour)) // 500 ns before RunAt
		tickAndDrain(t, h)
		require.Zero(t, runs.Load(), "the job ran 500 ns before its RunAt")

		h.clock.Set(at.Add(halfMicro))
		tickAndDrain(t, h)
		require.Equal(t, int32(1), runs.Load(), "the job runs once its RunAt has passed")
	})
}

// Every other time a job must not run before is rounded up alike: Delay's,
// a debounce's (first call and a call that joins), a snooze's and a
// RetryAfter's.
func TestEveryNotBeforeTimeIsRoundedUpToTheMicrosecond(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[notBeforeJob]) error {
			switch runs.Add(1) {
			case 1:
				return jobs.Snooze(time.Hour)
			case 2:
				return jobs.RetryAfter(time.Hour)
			}
			return nil
		}))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Debounce: time.Minute})))

		h.clock.Set(t0.Add(halfMicro))
		delayed := h.enqueue(notBeforeJob{N: 1}, jobs.Delay(48*time.Hour)) // after the rest
		require.Equal(t, t0.Add(48*time.Hour+time.Microsecond), h.job(delayed).RunAt, "Delay")
		debounced := h.enqueue(refresh{Shop: 1})
		require.Equal(t, t0.Add(time.Minute+time.Microsecond), h.job(debounced).RunAt, "Debounce, first call")
		h.clock.Set(t0.Add(10*time.Second + halfMicro))
		res, err := h.client.Enqueue(ctx, refresh{Shop: 1})
		require.NoError(t, err)
		require.True(t, res.Joined)
		require.Equal(t, t0.Add(70*time.Second+time.Microsecond), h.job(debounced).RunAt, "Debounce, a call that joins")

		// A snooze and a RetryAfter, asked for at a clock half a
		// microsecond into one, come back no earlier than they said.
		id := h.enqueue(notBeforeJob{N: 2})
		h.clock.Set(t0.Add(20*time.Second + halfMicro))
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, int32(1), runs.Load())
		back := t0.Add(time.Hour + 20*time.Second + halfMicro)
		require.Equal(t, back.Add(halfMicro), h.job(id).RunAt, "Snooze")
		h.clock.Set(back.Add(-halfMicro))
		tickAndDrain(t, h)
		require.Equal(t, int32(1), runs.Load(), "the snoozed job ran before its snooze was over")

		h.clock.Set(back.Add(time.Microsecond)) // also 500 ns into a microsecond
		tickAndDrain(t, h)
		require.Equal(t, int32(2), runs.Load())
		back = back.Add(time.Hour + time.Microsecond)
		require.Equal(t, back.Add(halfMicro), h.job(id).RunAt, "RetryAfter")
		h.clock.Set(back.Add(-halfMicro))
		tickAndDrain(t, h)
		require.Equal(t, int32(2), runs.Load(), "the job ran before its RetryAfter was over")
		h.clock.Set(back.Add(halfMicro))
		tickAndDrain(t, h)
		require.Equal(t, int32(3), runs.Load())
	})
}
