package jobs

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// givenBackError is why a claimed job cannot run on this worker as it is
// stored (decode): its kind has no handler here, or its handler here
// would not read the calls it holds. Unless final, the job is given back
// (classify takes it as a snooze of wait): it waits without spending an
// attempt, gives its concurrency slot back, and keeps the error as its
// last. final is set once it was given back for GiveBackFor (giveBack):
// it then fails for good.
type givenBackError struct {
	why   error
	msg   string
	wait  time.Duration
	final bool
}

func (e *givenBackError) Error() string { return e.msg }
func (e *givenBackError) Unwrap() error { return e.why }

// givenBackText is in the last error of a job given back, after the
// reason: "<why>; given back without spending an attempt (N time(s) so
// far) …". Explain tells a job given back by it (givenBack).
const givenBackText = "; given back without spending an attempt ("

// unrunnableLog names a line giveBack logs once per kind and worker: a
// kind with no handler here, or one whose jobs hold calls its handler
// here does not read; final for the jobs of either failed for good.
type unrunnableLog struct {
	kind         string
	calls, final bool
}

// giveBack is the error of a run of j that this worker cannot make, for
// the reason why: the job is given back, to be claimed again after a
// wait that doubles from 2 s with each time it was given back (its
// claims that spent no attempt: snoozes, 429s and releases count too), up
// to MaxGiveBackWait, with jitter; or, once it was given back for
// GiveBackFor (givenBackFor) and is at least that old, failed for good.
// Each kind's case is logged once.
func (w *Worker) giveBack(j *engine.Job, why error, line unrunnableLog) error {
	// This claim and every earlier one that gave its attempt back. After
	// an operator's retry, which sets the attempt back to 0, the earlier
	// runs count too: the wait reaches its longest sooner.
	times := max(j.Claims-int64(j.Attempt)+1, 1)
	e := &givenBackError{why: why, wait: jitter(min(DefaultBackoff(int(min(times, 64))), MaxGiveBackWait))}
	back := givenBackFor(times - 1)
	e.final = !j.CreatedAt.IsZero() && back >= w.cfg.GiveBackFor && !w.clock.Now().Before(j.CreatedAt.Add(w.cfg.GiveBackFor))
	if e.final {
		e.msg = fmt.Sprintf("%v; no worker ran it while it was given back for %s (WorkerConfig.GiveBackFor; %d time(s)), so it fails",
			why, w.cfg.GiveBackFor, times-1)
	} else {
		e.msg = fmt.Sprintf("%v%s%d time(s) so far) for a worker that can run it; it fails once given back for %s (WorkerConfig.GiveBackFor)",
			why, givenBackText, times, w.cfg.GiveBackFor)
	}
	line.final = e.final
	if _, seen := w.unknown.LoadOrStore(line, true); !seen {
		msg := "sluice: no handler for a claimed job's kind; it is given back, without spending an attempt, until a worker that has one claims it"
		if line.calls {
			msg = "sluice: a claimed job holds collected calls its handler here (registered with jobs.Register) would not read; " +
				"it is given back, without spending an attempt, until a worker whose handler reads them (jobs.RegisterCalls) claims it"
		}
		if line.final {
			msg = "sluice: a job given back for GiveBackFor, no worker running it, fails for good (logged once per kind)"
		}
		w.log.Error(msg, "kind", j.Kind, "job_id", j.ID, "calls", j.Calls, "err", e.msg)
	}
	return e
}

// givenBackFor is how long a job given back n times has spent given back
// at least, reckoned from the schedule of the waits (giveBack): the wait
// after its k-th give-back, min(DefaultBackoff(k), MaxGiveBackWait), each
// at its shortest (jitter takes up to 10% off). Each claim that spent no
// attempt counts as a give-back (snoozes, 429s and releases are not told
// apart), so a job whose handler snoozed it often is reckoned given back
// for longer. Only the count is stored: no migration, and nothing on the
// claim path.
func givenBackFor(n int64) time.Duration {
	var d time.Duration
	for k := int64(1); k <= n; k++ {
		wait := min(DefaultBackoff(int(min(k, 64))), MaxGiveBackWait)
		if wait == MaxGiveBackWait {
			// Every later wait is the longest: no loop over a job's
			// thousands of claims, and no overflow.
			rest := n - k + 1
			if rest >= int64(math.MaxInt64-d)/int64(wait) {
				return time.Duration(math.MaxInt64)
			}
			d += time.Duration(rest) * wait
			break
		}
		d += wait
	}
	return d - d/10
}
