package jobs

import (
	"context"
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
// it then fails for good. Unless final, record is the record of its
// streak that msg holds (givenBackText, the streak, ")"): the one text
// the job's last error keeps as a give-back's (engine.LastErrorText).
type givenBackError struct {
	why    error
	msg    string
	record string
	wait   time.Duration
	final  bool
}

func (e *givenBackError) Error() string { return e.msg }
func (e *givenBackError) Unwrap() error { return e.why }

// givenBackText is in the last error of a job given back, after the
// reason: "<why>; given back without spending an attempt (<its streak>)
// …" (giveBackStreak). Explain tells a job given back by it (givenBack).
// Only a give-back's own record keeps it as is: the store quotes it in
// any other last error (engine.LastErrorText), a handler's error, a
// panic or an operator's reason, so that none reads as a give-back's.
const givenBackText = engine.GivenBackMark

// unrunnableLog names a line giveBack logs once per kind and worker: a
// kind with no handler here, or one whose jobs hold calls its handler
// here does not read; final for the jobs of either failed for good.
type unrunnableLog struct {
	kind         string
	calls, final bool
}

// giveBack is the error of a run of j that this worker cannot make, for
// the reason why: the job is given back, to be claimed again after a
// wait that doubles from 2 s with each time it was given back in a row
// (giveBackStreak), up to MaxGiveBackWait, with jitter; or, once its
// streak lasted GiveBackFor, failed for good. The streak must have lasted
// that long both by this worker's clock, from the time of its first
// give-back, and by the waits of its give-backs, each at its shortest
// (givenBackFor): a worker whose clock is off fails no job early. Each
// kind's case is logged once.
func (w *Worker) giveBack(ctx context.Context, j *engine.Job, why error, line unrunnableLog) error {
	now := w.clock.Now()
	s := w.streakOf(ctx, j, now)
	e := &givenBackError{why: why, wait: jitter(min(DefaultBackoff(int(min(s.times, 64))), MaxGiveBackWait))}
	e.final = givenBackFor(s.times-1) >= w.cfg.GiveBackFor && now.Sub(s.since) >= w.cfg.GiveBackFor
	if e.final {
		e.msg = fmt.Sprintf("%v; no worker ran it while it was given back for %s (WorkerConfig.GiveBackFor; %d time(s)), so it fails",
			why, w.cfg.GiveBackFor, s.times-1)
	} else {
		e.record = givenBackText + s.String() + ")"
		e.msg = fmt.Sprintf("%v%s for a worker that can run it; it fails once given back for %s (WorkerConfig.GiveBackFor)",
			why, e.record, w.cfg.GiveBackFor)
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

// streakOf is the streak j's give-back at now is part of (giveBackStreak),
// read from the job's last error: a claim does not return it, and only a
// give-back needs it. A read that fails starts a new streak, which only
// puts the job's failure off.
func (w *Worker) streakOf(ctx context.Context, j *engine.Job, now time.Time) giveBackStreak {
	s := giveBackStreak{times: 1, since: now.UTC().Truncate(time.Second), claim: j.Claims}
	info, err := w.store.GetJob(ctx, j.ID)
	if err != nil {
		w.log.Warn("sluice: could not read the last error of a job given back; its give-backs in a row are counted afresh",
			"kind", j.Kind, "job_id", j.ID, "err", err)
		return s
	}
	return s.after(info.LastError, j.Claims-int64(j.Attempt))
}

// givenBackFor is how long a job given back n times in a row has spent
// given back at least, reckoned from the schedule of the waits
// (giveBack): the wait after its k-th give-back, min(DefaultBackoff(k),
// MaxGiveBackWait), each at its shortest (jitter takes up to 10% off).
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
