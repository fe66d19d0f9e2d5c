package jobs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/heartbeat"
)

// Run works jobs until ctx is done, then shuts down gracefully: it stops
// claiming, lets running jobs finish for up to ShutdownTimeout, cancels the
// rest and releases them back to ready. It writes the results in hand
// before it returns; one that waits for a concurrency key another
// transaction holds is written as soon as that transaction ends, or, if
// it has not by ShutdownTimeout after the stop, its job is released back
// to ready. It refuses to start against a
// database with pending migrations. Stopped before it started (ctx done
// while it checks the schema or registers), it returns nil. It returns
// ErrWorkerRunning while another Run or Drain of the worker is in
// progress; once Run returned, the worker may be Run again, as a new
// process (see Worker).
func (w *Worker) Run(ctx context.Context) error {
	if !w.active.CompareAndSwap(false, true) {
		return fmt.Errorf("jobs: worker: Run: %w", ErrWorkerRunning)
	}
	defer w.active.Store(false)
	// What one Run keeps apart from the Run before it, whose released
	// handlers may not have returned yet (they send no result).
	w.setStopping(false)
	w.declared.restart()
	w.jobs = &sync.WaitGroup{}
	w.results = make(chan result, w.cfg.Concurrency)
	if err := w.startUp(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	jobsCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(nil)
	wake, unsubscribe := w.store.Subscribe(w.cfg.Queues, w.log)
	defer unsubscribe()
	completed := make(chan struct{})
	go w.complete(completed)
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beaten := make(chan struct{})
	go func() { defer close(beaten); w.heartbeat(beatCtx) }()
	if w.limits != nil {
		if err := w.limits.refresh(ctx, w.store, w.storeClock(), w.cfg.Horizon); err != nil {
			w.log.Warn("sluice: refresh rate-limit overrides", "err", err)
		}
	}
	w.declareSlots(ctx)
	declared := make(chan struct{})
	go func() { defer close(declared); w.declareHeldSlots(ctx) }()
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		if w.limits != nil {
			w.refreshOverrides(beatCtx)
		}
	}()
	w.log.Info("sluice: worker started", "process_id", w.pid.Load(), "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)

	w.loop(ctx, jobsCtx, wake)
	w.sweeps.Wait()
	<-declared

	w.stoppedAt = w.clock.Now()
	w.setStopping(true)
	w.shutdown(stopJobs)
	// A job that finished before shutdown released the rest is still
	// sending its result; every other one was released and sends none.
	w.sending.Wait()
	close(w.results)
	<-completed
	stopBeat()
	<-beaten
	<-refreshed // no refresh of this Run overlaps the next Run's
	if w.strayClaims > 0 {
		// The last look after a failed claim failed too: once more before
		// the process row goes, after which the strays would wait to be
		// presumed lost, and be counted as lost runs that never ran.
		switch ids, err := w.releaseStrays(ctx, w.pid.Load()); {
		case err != nil:
			w.log.Warn("sluice: release the jobs a failed claim may have marked running; they come back when this process is presumed lost", "err", err)
		case len(ids) > 0:
			w.log.Warn("sluice: released jobs a failed claim had marked running after all", "jobs", ids)
		}
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.store.DeregisterProcess(bg, w.pid.Load()); err != nil {
		w.log.Warn("sluice: deregister", "err", err)
	}
	w.log.Info("sluice: worker stopped", "process_id", w.pid.Load())
	return nil
}

// startUp checks the schema and registers the worker's process.
func (w *Worker) startUp(ctx context.Context) error {
	if err := w.store.CheckSchema(ctx); err != nil {
		return fmt.Errorf("jobs: worker: %w", err)
	}
	return w.register(ctx)
}

func (w *Worker) register(ctx context.Context) error {
	host, _ := os.Hostname()
	pid, err := w.store.RegisterProcess(ctx, engine.Process{
		Kind: "worker", Name: w.cfg.Name, Hostname: host, PID: os.Getpid(), Queues: strings.Join(w.cfg.Queues, ","),
	}, w.storeClock())
	if err != nil {
		return fmt.Errorf("jobs: worker: %w", err)
	}
	w.pid.Store(pid)
	return nil
}

// refreshOverrides reads the rate-limit overrides every OverrideRefresh
// until ctx is done, and hands a limit an override changed to the
// budgets whose jobs are all parked (limitsView.reprice).
func (w *Worker) refreshOverrides(ctx context.Context) {
	t := w.clock.NewTimer(w.cfg.OverrideRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := w.limits.refresh(ctx, w.store, w.storeClock(), w.cfg.Horizon); err != nil && ctx.Err() == nil {
			w.log.Warn("sluice: refresh rate-limit overrides", "err", err)
		}
		t.Reset(w.cfg.OverrideRefresh)
	}
}

// declareSlots declares the worker's concurrency limits on the semaphores
// of their keys that record another (slotDeclarations.declare), at its
// start, skipping those another transaction holds (declareHeldSlots
// declares on them). A failure is logged, and declareHeldSlots tries
// again. Nothing runs without a concurrency limit.
func (w *Worker) declareSlots(ctx context.Context) {
	if w.declared == nil {
		return
	}
	if err := w.declared.declare(ctx, w.store, w.storeClock(), w.log, false); err != nil && ctx.Err() == nil {
		w.log.Warn("sluice: declare concurrency limits; trying again", "err", err)
	}
}

// declareHeldSlots declares the worker's concurrency limits on what its
// start left (declareSlots): the keys another transaction held, each in
// a transaction that waits for its lock, so that the limit lands as soon
// as the holder ends, and in the order the starts that wait on the key
// queued for it; and the scopes whose declaration failed. A failure
// (a lock wait that timed out, a lost connection) is logged and tried
// again after a backoff, from 1 s doubling to a minute, until everything
// is declared or ctx is done. Run waits for it before it returns.
func (w *Worker) declareHeldSlots(ctx context.Context) {
	if w.declared == nil {
		return
	}
	for failures := 0; w.declared.pending() && ctx.Err() == nil; {
		err := w.declared.declare(ctx, w.store, w.storeClock(), w.log, true)
		if err == nil || ctx.Err() != nil {
			continue
		}
		failures++
		pause := min(time.Second<<min(failures-1, 6), time.Minute)
		w.log.Warn("sluice: declare concurrency limits on the keys another transaction held", "err", err, "retry_in", pause)
		t := w.clock.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
}

// heartbeat stamps the process row and reaps dead processes every
// HeartbeatInterval until ctx is done.
func (w *Worker) heartbeat(ctx context.Context) {
	heartbeat.Run(ctx, w.store, w.clock, w.storeClock(), w.log, w.cfg.HeartbeatInterval, w.cfg.DeadAfter, &w.pid, w.register)
}
