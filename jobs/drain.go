package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/heartbeat"
)

// DrainResult counts what a Drain did.
type DrainResult struct {
	// Completed, Retried, Failed, Cancelled and Snoozed count the runs
	// that ended so: completed, failed and to be retried, failed for
	// good, cancelled, snoozed. A result that waits for a concurrency key
	// another transaction holds is counted once it is written; a run
	// whose job the drain released instead, as its ctx ended (its
	// outcome dropped, the job to run again), is counted in none, as
	// Hooks.OnFinish reports it released.
	Completed, Retried, Failed, Cancelled, Snoozed int
	// Throttled counts runs an upstream refused (RetryAfter).
	Throttled int
	// Deferred counts deferrals by rate limits (a job may wait more than
	// once), as the jobs record them and Hooks.OnDefer reports them: the
	// jobs a claim deferred, and those it displaced (sent to later slots
	// to make room for more urgent ones, DeferEvent.Displaced).
	Deferred int
}

// count counts a run that ended with o; a released run is counted in none.
func (r *DrainResult) count(o Outcome) {
	switch o {
	case OutcomeCompleted:
		r.Completed++
	case OutcomeRetried:
		r.Retried++
	case OutcomeFailed:
		r.Failed++
	case OutcomeCancelled:
		r.Cancelled++
	case OutcomeSnoozed:
		r.Snoozed++
	case OutcomeThrottled:
		r.Throttled++
	}
}

// countWritten counts the runs of done, results just written, whose
// report waited for their write (reportedOnceWritten).
func (r *DrainResult) countWritten(done []result) {
	for _, d := range done {
		if d.reportedOnceWritten() {
			r.count(outcomeOf(d))
		}
	}
}

// Ran is how many runs ended, whatever their outcome.
func (r DrainResult) Ran() int {
	return r.Completed + r.Retried + r.Failed + r.Cancelled + r.Snoozed + r.Throttled
}

// Drain works the worker's queues inline until no job is ready, then
// returns. Before each claim it promotes due scheduled jobs and hands
// slots to parked ones, on the worker's clock, which it never advances:
// with a fake clock, a test decides when retries and rate-limited jobs come
// due. Jobs run one at a time in the calling goroutine, with the same
// claims, limits and outcomes as Run; each job's result is written as the
// job ends, but one whose concurrency slot goes back to a key another
// transaction holds (an app's open transaction that enqueued a job of the
// key): that one is written again after each later job, and, once no job
// is left, Drain waits for its key before it claims again and returns; a
// drain whose ctx is done first releases its job back to ready, to run
// again. It heartbeats as Run does (every HeartbeatInterval, and before
// each job once one is due on the worker's clock, so that handlers that
// advance a fake clock count), so a drain longer than DeadAfter is not
// presumed dead; one that learns it was anyway (it stalled past DeadAfter)
// registers again, and claims again instead of running the rest of the
// claim it had made, even when registering again failed. Its first
// round declares the worker's concurrency limits on their keys, as Run's
// start does, and waits for the keys another transaction holds (as an
// enqueue of them would): a transaction that holds one open holds the
// drain until it ends or ctx is done. It is meant for tests and scripts.
//
// Once ctx is done the drain stops as a stopping Run does, and returns an
// error wrapping ctx.Err(): the job running then is given ctx, done, as
// its context (what it returns is its outcome, as for any run); the jobs
// of its claim not started yet are not run, but released back to ready
// with their attempts given back; and a result it cannot write (the
// database away) is tried as a stopping worker's are (up to ten times,
// for about 40 s) and then left to the reaper: its job runs again once
// the drain's process is presumed dead, and the error says so. Like Run,
// it returns ErrWorkerRunning while another Run or Drain of the worker is
// in progress.
func (w *Worker) Drain(ctx context.Context) (DrainResult, error) {
	var out DrainResult
	if !w.active.CompareAndSwap(false, true) {
		return out, fmt.Errorf("jobs: drain: %w", ErrWorkerRunning)
	}
	defer w.active.Store(false)
	// Once ctx is done the drain claims no more: it is stopping, as a Run
	// is from then, and its results are written as a stopping worker's.
	w.setStopping(false)
	w.declared.restart()
	stopped := make(chan struct{})
	stopOnDone := context.AfterFunc(ctx, func() { w.setStopping(true); close(stopped) })
	defer func() {
		if !stopOnDone() {
			<-stopped // set before a Run of the worker may reset it
		}
	}()
	if err := w.store.CheckSchema(ctx); err != nil {
		return out, fmt.Errorf("jobs: drain: %w", err)
	}
	if err := w.register(ctx); err != nil {
		return out, err
	}
	defer func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.store.DeregisterProcess(bg, w.pid.Load())
	}()
	givenUp := w.givenUpCount()
	var unreleased error // the jobs of its last claim it could not release as it stopped
	// It heartbeats as Run does, in a goroutine (a handler may run long),
	// and also before each job: a drain knows when its jobs took time,
	// even on a fake clock its handlers advance, which the goroutine would
	// see only when the scheduler gets to it.
	beat := heartbeat.New(w.store, w.clock, w.storeClock(), w.log, w.cfg.HeartbeatInterval, w.cfg.DeadAfter, &w.pid, w.register)
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beaten := make(chan struct{})
	go func() { defer close(beaten); beat.Run(beatCtx) }()
	defer func() { stopBeat(); <-beaten }() // before it deregisters
	// The results left for keys another transaction holds (see
	// held_results.go): written again with each later result, and waited
	// for before the drain returns; those a drain returning early could
	// not write have their jobs released, to run again.
	var held []result
	defer func() {
		if len(held) > 0 {
			w.releaseHeld(held)
		}
	}()
	for ctx.Err() == nil {
		now := w.storeClock()
		if w.limits != nil {
			// First the overrides: a changed limit reaches its parked
			// budgets before they are unparked.
			if err := w.limits.refresh(ctx, w.store, now, w.cfg.Horizon); err != nil {
				return out, fmt.Errorf("jobs: drain: %w", err)
			}
			for {
				n, err := w.store.Unpark(ctx, now, w.cfg.Horizon, 1000, engine.DefaultUnparkBatch)
				if err != nil {
					return out, fmt.Errorf("jobs: drain: %w", err)
				}
				if n < engine.DefaultUnparkBatch {
					break
				}
			}
		}
		if w.declared != nil {
			// Waiting for the keys another transaction holds, as an
			// enqueue would: Drain returns with every key declared on.
			if err := w.declared.declare(ctx, w.store, now, w.log, true); err != nil {
				return out, fmt.Errorf("jobs: drain: %w", err)
			}
		}
		// After Unpark: the slots it hands parked jobs may be due already.
		for {
			p, err := w.store.PromoteDue(ctx, now, 1000)
			if err != nil {
				return out, fmt.Errorf("jobs: drain: %w", err)
			}
			if !p.More {
				break
			}
		}
		// A beat that finds the drain presumed dead from here on tells it
		// that this claim is no longer its own, whether or not it
		// registered again (the process id changes only if it did).
		pid, reaps := w.pid.Load(), beat.Reaps()
		w.leftovers = w.mayHaveLeftovers() // what a removed limit or Fair left runs too
		res, err := w.claim(ctx, pid, w.cfg.Concurrency, 0, nil, false)
		if err != nil {
			return out, w.releaseDrainStrays(ctx, pid, fmt.Errorf("jobs: drain: %w", err))
		}
		out.Deferred += len(res.Deferred) + len(res.Displaced)
		if len(res.Jobs) == 0 {
			if len(res.Deferred) > 0 {
				continue // every candidate waited; there may be more behind them
			}
			if len(held) > 0 {
				// Waiting for their keys, as the declarations do; then
				// claiming again: the slots they give back may have made
				// blocked jobs ready.
				left := w.flushWaiting(ctx, held)
				out.countWritten(w.wrote(held, left))
				held = left
				continue
			}
			return out, nil
		}
		for i, j := range res.Jobs {
			if ctx.Err() != nil {
				// Stopped while an earlier job of the claim ran: the rest
				// would only run with a context already done, and fail
				// (for good, on their last attempt) without a chance.
				// They go back to ready, as a stopping Run's do.
				unreleased = w.releaseUnrun(ctx, pid, res.Jobs[i:], false)
				break
			}
			beat.BeatIfDue(beatCtx)
			if beat.Reaps() != reaps {
				// Presumed dead (the drain stalled past DeadAfter): the
				// jobs of the claim not run yet went back to ready, and
				// may run elsewhere already. They are claimed again (as
				// the process registered anew, or, if that failed, under
				// the old id until a beat registers it), not run here
				// under a claim that is no longer the drain's.
				_ = w.releaseUnrun(ctx, pid, res.Jobs[i:], true) // logged; its next claim goes on
				break
			}
			r := w.execute(ctx, j, &runState{base: w.log, job: j, now: w.clock.Now})
			r.pid = pid
			if !r.reportedOnceWritten() {
				w.finished(j, r)
				out.count(outcomeOf(r))
			} // else once written (reported and counted then), or released
			// Written at once, as Run's recorder does: a job that ran is
			// not left running (to be presumed lost and run again) while
			// the rest of the claim runs. One whose slot goes back to a
			// key another transaction holds waits for it, and is written
			// again with each later result, then before the drain returns.
			w.unwritten(r)
			batch := append(slices.Clone(held), r)
			held = w.flush(context.Background(), batch)
			out.countWritten(w.wrote(batch, held))
		}
	}
	return out, w.drainStopped(ctx, givenUp, unreleased)
}

// drainStopped is the error of a drain whose ctx ended: ctx.Err(), and
// what the drain left for the reaper, if anything: the results the
// recorder gave up writing since its count was givenUp, and the jobs of
// its claim it could not release (unreleased).
func (w *Worker) drainStopped(ctx context.Context, givenUp int, unreleased error) error {
	msg := ""
	if n := w.givenUpCount() - givenUp; n > 0 {
		msg = fmt.Sprintf("; results not written before it stopped: %d (their jobs stay running until this process is presumed dead, then run again)", n)
	}
	switch {
	case unreleased != nil:
		return fmt.Errorf("jobs: drain: %w%s; and the jobs of its claim not run were not released (they come back once this process is presumed dead): %w", ctx.Err(), msg, unreleased)
	case msg != "":
		return fmt.Errorf("jobs: drain: %w%s", ctx.Err(), msg)
	}
	return ctx.Err()
}

// releaseUnrun releases, with their attempts given back, the jobs of a
// drain's claim under pid that it did not run: once its context ended
// (they are not run with a context already done), or once it learned it
// had been presumed dead (presumedDead): those the reaper released are no
// longer pid's and stay as they are; those the claim took after the reap,
// before the drain registered again, would otherwise stay running for a
// process that no longer exists until presumed lost. A release that fails
// is logged and returned.
func (w *Worker) releaseUnrun(ctx context.Context, pid int64, js []*engine.Job, presumedDead bool) error {
	runs := make([]engine.Run, len(js))
	ids := make([]int64, len(js))
	for i, j := range js {
		runs[i], ids[i] = j.Run(), j.ID
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := w.store.Release(bg, pid, w.storeClock(), runs)
	if err != nil {
		err = fmt.Errorf("release jobs %v: %w", ids, err)
	}
	switch {
	case err != nil && presumedDead:
		w.log.Error("sluice: drain: release the jobs of a claim made before this process was presumed dead; they come back when presumed lost", "err", err, "jobs", ids)
	case err != nil:
		w.log.Error("sluice: drain: release the jobs of its claim not run yet as it stops; they come back when this process is presumed dead", "err", err, "jobs", ids)
	case presumedDead:
		w.log.Warn("sluice: drain: this process was presumed dead; the jobs of its claim not run yet are claimed again", "jobs", ids)
	default:
		w.log.Info("sluice: drain: stopped; released the jobs of its claim not run yet back to ready", "jobs", ids)
	}
	return err
}

// releaseDrainStrays releases, before a drain returns claimErr, the jobs
// its failed claim under pid may have marked running after all (its
// commit landed, its reply lost), as Run's worker does after a failed
// claim: the drain ran and recorded every job of its earlier claims, so
// any job running for pid but those whose results it gave up writing is
// one. Left so, the process deregistered, they would wait to be presumed
// lost, and be counted as lost runs that never ran. A release that fails
// too is added to the error.
func (w *Worker) releaseDrainStrays(ctx context.Context, pid int64, claimErr error) error {
	ids, err := w.releaseStrays(ctx, pid)
	if err != nil {
		return fmt.Errorf("%w; and the jobs the claim may have marked running were not released (they come back once this process is presumed lost): %w", claimErr, err)
	}
	if len(ids) > 0 {
		w.log.Warn("sluice: drain: released jobs a failed claim had marked running after all", "jobs", ids)
	}
	return claimErr
}
