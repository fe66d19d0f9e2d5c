package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// twoBursts registers sms on two registries, as two versions of an app
// during a rolling deploy: both at most 10 a minute on one budget, the old
// with a burst of 10, the new with a burst of 1. Jobs are enqueued by the
// old version; record sees every start.
func twoBursts(t *testing.T, h *harness, record func(time.Time)) (oldReg, newReg *jobs.Registry) {
	oldReg, newReg = jobs.NewRegistry(), jobs.NewRegistry()
	run := func(context.Context, *jobs.Job[sms]) error { record(h.clock.Now()); return nil }
	require.NoError(t, jobs.Register(oldReg, run, jobs.RateLimit(ratelimit.Limit[sms]{To: 10, Per: time.Minute, Burst: 10, Key: "global"})))
	require.NoError(t, jobs.Register(newReg, run, jobs.RateLimit(ratelimit.Limit[sms]{To: 10, Per: time.Minute, Burst: 1, Key: "global"})))
	h.reg = oldReg
	h.client = jobs.NewClient(testdb.Public(h.store), oldReg, jobs.ClientConfig{Clock: h.clock})
	return oldReg, newReg
}

// Two versions' workers that differ only in Burst take turns on a budget
// the old one spent at once. The new one converts the old one's debt (ten
// admissions of 60 s) into its own six-second intervals; the old one used
// to read the result as one of its own intervals and admit nine more at
// once, every turn (37 starts in a minute after three turns). Each now
// counts the other's admissions in its own intervals, and the minute holds
// ten.
func TestTwoWorkersThatDisagreeOnlyOnBurstNeverAdmitMoreThanToInAWindow(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		record, starts := startRecorder()
		oldReg, newReg := twoBursts(t, h, record)
		for range 10 {
			h.enqueue(sms{})
		}
		require.Equal(t, 10, drainWith(t, h, oldReg), "a quiet budget admits the old burst")
		for range 3 { // the two versions' workers take turns, within one second
			h.enqueue(sms{})
			drainWith(t, h, newReg)
			for range 10 {
				h.enqueue(sms{})
			}
			drainWith(t, h, oldReg)
			h.clock.Advance(100 * time.Millisecond)
		}
		require.LessOrEqual(t, ratelimit.BusiestWindow(starts(), time.Minute), 10,
			"both versions declare 10 a minute, yet one minute held %d starts", ratelimit.BusiestWindow(starts(), time.Minute))
	})
}

// The same two versions over a backlog, for ten minutes of a rolling
// deploy: a dispatcher ticks and the two versions' workers take turns
// every two seconds. Once the first minute (which holds the old burst) has
// passed, every minute holds at most ten: the old burst does not come back
// (it used to: twelve in a minute), and the backlog drains at least at the
// slower version's pace.
func TestTwoWorkersThatDisagreeOnlyOnBurstKeepToOverABacklog(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		record, starts := startRecorder()
		oldReg, newReg := twoBursts(t, h, record)
		for range 400 {
			h.enqueue(sms{})
		}
		start := h.clock.Now()
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		turn := 0
		steps(t, h, d, func() {
			turn++
			if turn%2 == 0 {
				drainWith(t, h, newReg)
			} else {
				drainWith(t, h, oldReg)
			}
		}, 300, 2*time.Second)
		late := since(starts(), start.Add(time.Minute))
		require.LessOrEqual(t, ratelimit.BusiestWindow(late, time.Minute), 10,
			"both versions declare 10 a minute; after the first minute %d jobs started in 9 minutes, %d in the busiest minute",
			len(late), ratelimit.BusiestWindow(late, time.Minute))
		require.GreaterOrEqual(t, len(late), 9, "the backlog drains at least at the slower version's pace (To − Burst + 1 = 1 a minute); %d in 9 minutes", len(late))
	})
}
