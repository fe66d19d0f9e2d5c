package jobs_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// A kind's Backoff (jobs.Backoff) is the app's own code, and its delay was
// used exactly as returned. A negative one (an exponential that overflowed,
// time.Second << attempt) scheduled the retry in the past: the job ran
// again at once, attempt after attempt, until its attempts ran out in one
// drain. A huge one (math.MaxInt64, a saturated product) scheduled it 292
// years away, and near the end of the year 9999 past the latest run time a
// job may have. A negative delay now waits the default backoff, a huge one
// is cut to jobs.MaxBackoff (or to the latest run time), and either is
// logged once per kind.

// backoffKind fails every run, with the given Backoff.
func backoffKind(t *testing.T, h *harness, backoff func(int) time.Duration) {
	t.Helper()
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
		return errors.New("upstream 503")
	}, jobs.Backoff(backoff), jobs.MaxAttempts(5)))
}

// count returns how many lines hold s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func TestANegativeBackoffRetriesAfterTheDefaultBackoff(t *testing.T) {
	for _, d := range []time.Duration{-time.Hour, math.MinInt64} {
		t.Run(d.String(), func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				backoffKind(t, h, func(int) time.Duration { return d })
				a, b := h.enqueue(waitJob{}), h.enqueue(waitJob{})
				logs := &logLines{}
				w := h.worker(jobs.WorkerConfig{Logger: logs.logger()})
				res := drainGuarded(t, w)
				require.Equal(t, jobs.DrainResult{Retried: 2}, res, "each job ran once, not again at once")
				for _, id := range []int64{a, b} {
					j := h.job(id)
					require.Equal(t, engine.StateScheduled, j.State)
					require.Equal(t, 1, j.Attempt)
					wait := j.RunAt.Sub(t0)
					require.True(t, wait >= 1800*time.Millisecond && wait <= 2200*time.Millisecond, "the default backoff, 2 s ±10%%: %s", wait)
				}
				require.Equal(t, 1, logs.count("Backoff returned a negative delay"), "logged once per kind")
				require.Contains(t, logs.find(t, "negative delay"), "kind=wait")

				// The next attempt waits the default backoff again.
				h.clock.Advance(2200 * time.Millisecond)
				require.Equal(t, jobs.DrainResult{Retried: 2}, drainGuarded(t, w))
				j := h.job(a)
				require.Equal(t, 2, j.Attempt)
				wait := j.RunAt.Sub(h.clock.Now())
				require.True(t, wait >= 3600*time.Millisecond && wait <= 4400*time.Millisecond, "the default backoff, 4 s ±10%%: %s", wait)
				require.Equal(t, 1, logs.count("Backoff returned a negative delay"), "logged once per kind")
			})
		})
	}
}

func TestAHugeBackoffIsCutToMaxBackoff(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, jobs.MaxBackoff + time.Microsecond} {
		t.Run(d.String(), func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				backoffKind(t, h, func(int) time.Duration { return d })
				a, b := h.enqueue(waitJob{}), h.enqueue(waitJob{})
				logs := &logLines{}
				res := drainGuarded(t, h.worker(jobs.WorkerConfig{Logger: logs.logger()}))
				require.Equal(t, jobs.DrainResult{Retried: 2}, res)
				for _, id := range []int64{a, b} {
					j := h.job(id)
					require.Equal(t, engine.StateScheduled, j.State, "kept, to run again")
					require.Equal(t, 1, j.Attempt)
					require.Equal(t, t0.Add(jobs.MaxBackoff), j.RunAt)
				}
				require.Equal(t, 1, logs.count("Backoff returned a delay longer than sluice keeps"), "logged once per kind")
				require.Contains(t, logs.find(t, "longer than sluice keeps"), "kind=wait")
			})
		})
	}
}

// No time.Duration (at most 292 years) overflows a run time in int64
// microseconds (±292,000 years) from any time a job can run at; what a
// long delay can overflow is the latest run time a job may have, the end
// of the year 9999 (engine.MaxRunAt: times past it have no RFC 3339 form),
// from a clock near it. The retry waits until then, and no later.
func TestABackoffPastTheLatestRunTimeRetriesAtIt(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, jobs.MaxBackoff, 31 * 24 * time.Hour} {
		t.Run(d.String(), func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				h.clock.Set(engine.MaxRunAt.Add(-30 * 24 * time.Hour).Truncate(time.Second))
				backoffKind(t, h, func(int) time.Duration { return d })
				id := h.enqueue(waitJob{})
				logs := &logLines{}
				res := drainGuarded(t, h.worker(jobs.WorkerConfig{Logger: logs.logger()}))
				require.Equal(t, jobs.DrainResult{Retried: 1}, res)
				j := h.job(id)
				require.Equal(t, engine.StateScheduled, j.State, "kept, to run again")
				require.Equal(t, 1, j.Attempt)
				require.Equal(t, engine.MaxRunAt, j.RunAt)
				require.Equal(t, 1, logs.count("Backoff returned a delay longer than sluice keeps"))
			})
		})
	}
}
