package jobs

import (
	"context"
	"time"
)

// lookForStrays releases the strays a failed claim may have left
// (releaseStrays), and forgets those claims once that succeeded. A
// failure is only logged: the claims stay pending, and the loop tries
// again before its next claim round (and Run at shutdown).
func (w *Worker) lookForStrays(ctx context.Context) {
	ids, err := w.releaseStrays(ctx, w.pid.Load())
	if err != nil {
		w.log.Debug("sluice: look for jobs a failed claim left running; trying again before the next claim", "err", err)
		return
	}
	w.strayClaims = 0
	if len(ids) > 0 {
		w.log.Warn("sluice: released jobs a failed claim had marked running after all", "jobs", ids)
	}
}

// releaseStrays releases the jobs a failed claim may have marked running
// for this process after all (its commit landed, its reply was lost):
// every job running for it that it neither runs nor has a result for
// (see known). Without it they would stay running, unrun, for as long as
// the process lives, and be counted as lost runs once it stops. Only the
// claiming goroutine calls it (Drain's, in Drain), so no claim starts a job
// meanwhile. pid is the process id the claim was made under.
func (w *Worker) releaseStrays(ctx context.Context, pid int64) ([]int64, error) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return w.store.ReleaseStrays(bg, pid, w.storeClock(), w.known(pid), w.cfg.Concurrency*max(w.strayClaims, 1))
}

// maxStrayClaims bounds the failed claims counted as pending: they bound
// how many running jobs a release of strays looks at, and claims that
// fail for minutes on end (a database away) took none.
const maxStrayClaims = 100

// known returns the jobs the worker holds under pid, which no stray
// release may touch: those it runs (under any process id: a job whose
// lost run goes on may run anew under pid), those whose results are not
// written yet, and those whose results it gave up writing.
func (w *Worker) known(pid int64) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := make([]int64, 0, len(w.running)+len(w.unrecorded))
	for rj := range w.running {
		known = append(known, rj.job.ID)
	}
	for id := range w.unrecorded {
		known = append(known, id)
	}
	for id, p := range w.abandoned {
		if p == pid {
			known = append(known, id)
		} else {
			delete(w.abandoned, id) // a process that no longer exists
		}
	}
	return known
}

// gaveUp notes the results the recorder gave up writing: their jobs stay
// running for their process, though they ran.
func (w *Worker) gaveUp(rs []result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rs {
		w.abandoned[r.id] = r.pid
	}
	w.givenUp += len(rs)
}

// givenUpCount is how many results the recorder gave up writing so far.
func (w *Worker) givenUpCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.givenUp
}

// recorded forgets the results of batch, now written (or given up on).
func (w *Worker) recorded(batch []result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		if w.unrecorded[r.id]--; w.unrecorded[r.id] <= 0 {
			delete(w.unrecorded, r.id)
		}
	}
}
