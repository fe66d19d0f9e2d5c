package jobs

import (
	"context"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
)

// A result whose job gives a concurrency slot back — it finished for
// good, an upstream turned it away (RetryAfter), or the worker gave it
// back — is written with the slot given back, in one transaction, so
// that the slot goes back once, and never before the result is recorded.
// That transaction needs the key's semaphore, which an app's transaction
// holds from its EnqueueTx of a job of the key until it ends. The worker
// waits for no such lock (engine's FinishUnwaiting): the result is left
// out of its batch, the rest of the batch written, and written again
// until the key is free. Only that job waits: it stays running, holding
// its slot, as it did while its handler ran.

// The pause before a result left for a held key is written again, when
// no other result comes to write it with: heldRetryFirst, doubling to
// heldRetryMost while the key stays held.
const (
	heldRetryFirst = 100 * time.Millisecond
	heldRetryMost  = time.Second
)

// heldRetry paces the writes of the results left for held keys.
type heldRetry struct {
	clock clock.Clock
	pause time.Duration
}

func newHeldRetry(c clock.Clock) *heldRetry { return &heldRetry{clock: c, pause: heldRetryFirst} }

// next waits for the next result, and, while held is not empty, at most
// the pause before the results of held are written again. It reports the
// result it read, or again once the pause ran out instead, and ok false
// once results is closed and empty.
func (h *heldRetry) next(results <-chan result, held []result) (r result, ok, again bool) {
	if len(held) == 0 {
		r, ok = <-results
		return r, ok, false
	}
	t := h.clock.NewTimer(h.pause)
	defer t.Stop()
	select {
	case r, ok = <-results:
		return r, ok, false
	case <-t.C():
		h.pause = min(h.pause*2, heldRetryMost)
		return result{}, true, true
	}
}

// left notes what a write left for held keys: once nothing is, the next
// key held starts from the shortest pause again.
func (h *heldRetry) left(held []result) {
	if len(held) == 0 {
		h.pause = heldRetryFirst
	}
}

// finishHeld writes, once the worker has no more results to write, those
// still left for keys another transaction holds, waiting for their keys
// (flushWaiting) until ShutdownTimeout after the worker stopped claiming:
// a result lands as soon as the app's transaction ends, and a
// transaction that stays open holds the shutdown no longer than its
// timeout. The jobs of the results still unwritten then are released
// back to ready, as those still running at the timeout are, and run
// again (releaseHeld).
func (w *Worker) finishHeld(held []result) {
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rest := w.stoppedAt.Add(w.cfg.ShutdownTimeout).Sub(w.clock.Now()); rest > 0 {
		t := w.clock.AfterFunc(rest, cancel)
		defer t.Stop()
	} else {
		cancel() // one write more, waiting for nothing
	}
	left := w.flushWaiting(ctx, held)
	w.wrote(held, left)
	if len(left) > 0 {
		w.releaseHeld(left)
	}
}

// flushWaiting writes batch as flush does, and, while results are left for
// keys another transaction holds, waits until those keys are free
// (engine's AwaitSemaphores, which holds nothing else while it waits) and
// writes them again, until none is left or ctx is done. It returns what
// it could not write. With ctx done from the start it writes once. A
// write that leaves results again right after a wait (the key taken
// again meanwhile, or a wait that failed or had nothing to wait for)
// pauses heldRetryFirst before the next, so that nothing spins.
func (w *Worker) flushWaiting(ctx context.Context, batch []result) []result {
	left := w.flush(context.WithoutCancel(ctx), batch)
	for again := false; len(left) > 0 && ctx.Err() == nil; again = true {
		if again {
			t := time.NewTimer(heldRetryFirst)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		var keys []string
		for _, r := range left {
			if r.job != nil && r.job.ConcKey != "" && !slices.Contains(keys, r.job.ConcKey) {
				keys = append(keys, r.job.ConcKey)
			}
		}
		if err := w.store.AwaitSemaphores(ctx, keys); err != nil {
			if ctx.Err() != nil {
				break
			}
			// On MySQL, a lock held longer than innodb_lock_wait_timeout.
			w.log.Debug("sluice: wait for the concurrency keys of results left unwritten; trying again", "err", err, "keys", keys)
		}
		left = w.flush(ctx, left)
	}
	return left
}

// releaseHeld releases back to ready, with their attempts given back, the
// jobs of results left for held keys that a stopping worker (or a Drain
// that returns) could not write: their runs' outcomes are dropped, and
// they run again (their slots kept), rather than stay running for a
// process that is gone until presumed lost. A release that fails leaves
// them to that (gaveUp). Either way each run is reported to OnFinish now,
// as released, as a run released at shutdown is: its outcome was never
// written, and the job runs again.
func (w *Worker) releaseHeld(held []result) {
	pids, byPID := byProcess(held)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pid := range pids {
		rs := byPID[pid]
		runs := make([]engine.Run, len(rs))
		ids := make([]int64, len(rs))
		for i, r := range rs {
			runs[i], ids[i] = engine.Run{ID: r.id, Claim: r.claim}, r.id
		}
		slices.Sort(ids)
		if err := w.store.Release(ctx, pid, w.storeClock(), runs); err != nil {
			w.log.Error("sluice: release jobs whose results waited for a concurrency key another transaction held; they run again once this process is presumed dead",
				"err", err, "jobs", ids)
			w.gaveUp(rs)
			continue
		}
		w.log.Warn("sluice: released jobs whose results could not be written while another transaction held their concurrency key; they run again",
			"jobs", ids)
	}
	for _, r := range held {
		if r.reportedOnceWritten() {
			w.finished(r.job, result{id: r.id, t: engine.Transition{State: engine.StateReady}, err: r.err, took: r.took})
		}
	}
	w.recorded(held)
}

// reportedOnceWritten reports whether r's run is reported to OnFinish
// only once its result is written (wrote), or its job released
// (releaseHeld), rather than when its handler returns, as every other
// run is: a result whose job gives a concurrency slot back may be left
// for a key another transaction holds, and its job released in the end,
// its outcome dropped and the job to run again. Reported when the handler
// returned, such a run would count twice: as its outcome there, and again
// when the job runs again.
func (r result) reportedOnceWritten() bool { return r.holdsSlot && r.givesSlotBack() }

// wrote forgets the results of batch that a write did not leave (left):
// written, or given up on (their jobs stay running for the process). It
// reports to OnFinish those whose report waited for it
// (reportedOnceWritten), with the outcome the worker decided, as every
// other run is reported, and returns the results it forgot.
func (w *Worker) wrote(batch, left []result) []result {
	done := written(batch, left)
	w.recorded(done)
	for _, r := range done {
		if r.reportedOnceWritten() {
			w.finished(r.job, r)
		}
	}
	return done
}

// unwritten counts r among the results not written yet, as ran does for
// Run's: no release of a failed claim's strays takes its job for one.
func (w *Worker) unwritten(r result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unrecorded[r.id]++
}
