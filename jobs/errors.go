package jobs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// ErrNotFound is what Explain's error wraps for a job id that does not
// exist.
var ErrNotFound = engine.ErrNotFound

// ErrClockPastBudgets is what the error of a claim of rate-limited jobs
// (Worker.Run and Worker.Drain), of the dispatcher's hand-out of slots to
// parked jobs and of the clean-up of idle budgets wraps when the clock
// reads after 2262-04-11T23:47:16Z, the last time a rate-limit budget
// holds: no rate limit is decided, and nothing written, until the clock is
// right. Test for it with errors.Is.
var ErrClockPastBudgets = engine.ErrClockPastBudgets

// ErrJobTimeout is the cause of a handler's context when the job's timeout
// passes.
var ErrJobTimeout = errors.New("job timed out")

// ErrWorkerRunning is what Worker.Run and Worker.Drain return, at once and
// without touching the database, when a Run or Drain of the same worker
// has not returned yet: a worker works once at a time (Run it again once
// it returned, or create another worker to work alongside it).
var ErrWorkerRunning = errors.New("the worker is already running (a Run or Drain of it has not returned)")

// cancelError discards a job now.
type cancelError struct{ err error }

func (e *cancelError) Error() string { return "job cancelled: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// Cancel returns an error that, returned by a handler, discards the job now
// with err as the reason: no more attempts. A nil err is given a generic
// reason.
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by its handler")
	}
	return &cancelError{err: err}
}

// snoozeError runs a job again later without spending an attempt. back
// is set when the worker gave the job back, unable to run it (classify).
type snoozeError struct {
	d    time.Duration
	back *givenBackError
}

func (e *snoozeError) Error() string {
	if e.back != nil {
		return e.back.Error()
	}
	return fmt.Sprintf("job snoozed for %s", e.d)
}

// Snooze returns an error that, returned by a handler, runs the job again
// after d without counting this run as an attempt.
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

// DefaultBackoff is the delay before the retry that follows the given
// failed attempt: 2^attempt seconds, capped at 24 hours (2 s, 4 s, 8 s, …;
// the 17th and later wait a day). The worker adds ±10% jitter.
func DefaultBackoff(attempt int) time.Duration {
	if attempt >= 17 {
		return 24 * time.Hour
	}
	return min(time.Duration(1<<max(attempt, 1))*time.Second, 24*time.Hour)
}

// MaxBackoff is the longest a retry waits after a kind's Backoff: a longer
// delay (a time.Duration that overflowed, say) is cut to it, and logged
// once per kind. Nor does a retry wait past the end of the year 9999, the
// latest time a job may be enqueued for.
const MaxBackoff = 365 * 24 * time.Hour

// jitter spreads d by ±10%, so that jobs that failed together do not retry
// together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}
