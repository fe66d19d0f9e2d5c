package jobs

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

type runningJob struct {
	job *engine.Job
	// pid is the process id the job was claimed under: its result and its
	// release at shutdown count only for it.
	pid int64
	run runState
	// began is when its handler was to start (after the job's Hold): a
	// run released while it ran reports how long it had run by then.
	began    time.Time
	released bool
}

// start runs a job claimed under pid in its own goroutine.
func (w *Worker) start(ctx context.Context, j *engine.Job, pid int64) {
	rj := &runningJob{job: j, pid: pid, run: runState{base: w.log, job: j, now: w.clock.Now}, began: time.Now().Add(j.Hold)}
	rs := &rj.run
	w.mu.Lock()
	w.running[rj] = struct{}{}
	w.mu.Unlock()
	runs := w.jobs // this Run's: the next one has its own
	runs.Add(1)
	go func() {
		defer runs.Done()
		var res result
		returned := false
		defer func() {
			if !returned {
				if r := recover(); r != nil {
					panic(r) // the worker's own bug: handlers' panics are recovered
				}
				// The handler called runtime.Goexit (a test's t.FailNow):
				// its goroutine ends, but its attempt fails and its slot
				// here is freed, as for an error.
				res = w.failure(j, errGoexit).of(j, errGoexit, max(time.Since(rj.began), 0))
			}
			w.ran(rj, res)
		}()
		if j.Hold > 0 {
			// Admitted as of its slot, a moment ahead: it runs no sooner.
			t := w.clock.NewTimer(j.Hold)
			select {
			case <-ctx.Done():
			case <-t.C():
			}
			t.Stop()
		}
		res = w.execute(ctx, j, rs)
		returned = true
	}()
}

// errGoexit fails the attempt of a handler that called runtime.Goexit.
var errGoexit = errors.New("the handler called runtime.Goexit (t.FailNow?) instead of returning")

// ran reports a run's result to OnFinish and hands it to the recorder,
// unless its job was released (the shutdown reported the run as released
// then, and its result is ignored), and frees its slot. Whether a run was
// released is decided under w.mu, by whichever comes first: ran taking
// the run out of running, or shutdown marking it released. So each run is
// reported once.
func (w *Worker) ran(rj *runningJob, res result) {
	res.pid = rj.pid
	w.mu.Lock()
	delete(w.running, rj)
	released := rj.released
	if !released {
		w.sending.Add(1)
		w.unrecorded[rj.job.ID]++
	}
	w.mu.Unlock()
	if !released {
		if !res.reportedOnceWritten() {
			w.finished(rj.job, res)
		} // else once the recorder wrote it, or released its job
		w.results <- res
		w.sending.Done()
	}
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// shutdownGrace is how long cancelled jobs get to return before those still
// running are released.
const shutdownGrace = time.Second

// errShutdown is the cause of a job's context when the worker's shutdown
// timeout ran out.
var errShutdown = errors.New("worker shutting down")

// shutdown waits for running jobs up to the shutdown timeout, then cancels
// them, gives them a moment to return, and releases those still running
// back to ready.
func (w *Worker) shutdown(stopJobs context.CancelCauseFunc) {
	done := make(chan struct{})
	started := w.jobs
	go func() { started.Wait(); close(done) }()
	t := w.clock.NewTimer(w.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C():
	}
	stopJobs(errShutdown)
	grace := w.clock.NewTimer(shutdownGrace)
	select {
	case <-done:
	case <-grace.C():
	}
	grace.Stop()
	w.mu.Lock()
	// By the process id each was claimed under: a worker registered again
	// after being presumed dead may still run jobs claimed under its old
	// one. (A job's lost run and its new one are two runs of one id, at
	// two claims: only the one the job still runs under is released.)
	byPID := map[int64][]engine.Run{}
	var runs []*runningJob
	for rj := range w.running {
		if rj.released {
			continue // an earlier Run's, released then, still running
		}
		rj.released = true
		byPID[rj.pid] = append(byPID[rj.pid], rj.job.Run())
		runs = append(runs, rj)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for pid, rs := range byPID {
		ids := make([]int64, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if err := w.store.Release(ctx, pid, w.storeClock(), rs); err != nil {
			w.log.Error("sluice: release unfinished jobs; they come back when this process is presumed dead", "err", err, "jobs", ids)
			continue
		}
		w.log.Warn("sluice: released jobs still running at shutdown", "jobs", ids)
	}
	// Once the releases are written: the hooks and the callbacks are the
	// app's code (each guarded: one that panics is logged), and neither
	// their time nor their panics may keep a job from going back to ready.
	// Their runs' outcomes are ignored either way, even where a release
	// failed. Each run is reported now, as released, not when its handler
	// returns: the process may well exit first, and ran reports nothing
	// for a released run.
	for _, rj := range runs {
		w.finished(rj.job, result{id: rj.job.ID, t: engine.Transition{State: engine.StateReady}, took: max(time.Since(rj.began), 0)})
		rj.run.release()
	}
}
