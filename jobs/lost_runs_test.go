package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type lostRunStart struct{ N, Attempt int }

// guarantees.md, "Delivery" and "Graceful shutdown": a worker that paused
// past DeadAfter registers again and may claim anew a job whose lost run
// still goes on. Both runs are its own to track: the worker once kept its
// runs by job id, so the second overwrote the first's entry and the first,
// returning, deleted the second's. The second run was then unknown to the
// worker: its shutdown did not release it (it stayed running for a
// deregistered process), and had it returned after the shutdown it would
// have sent on the closed results channel.
func TestAJobClaimedAgainWhileItsLostRunGoesOnIsReleasedAtShutdown(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		started := make(chan lostRunStart, 10)
		unblock := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
		never := make(chan struct{}) // the second run of job 1 ignores its context until the test ends
		t.Cleanup(func() { close(never) })
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[waitJob]) error {
			started <- lostRunStart{j.Args.N, j.Attempt}
			switch {
			case j.Attempt == 1:
				<-unblock[j.Args.N]
			case j.Args.N == 1:
				<-never
			}
			return nil
		}))
		a := h.enqueue(waitJob{N: 1})
		h.enqueue(waitJob{N: 2})
		w := h.worker(jobs.WorkerConfig{Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		stop := h.run(w)
		require.ElementsMatch(t, []lostRunStart{{1, 1}, {2, 1}}, receive(t, started, 2))
		first := w.ProcessID()

		// The worker pauses; another process finds its heartbeat old and
		// releases both jobs.
		n, err := h.store.ReapDeadProcesses(ctx, engine.At(t0.Add(10*time.Minute)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		// It comes back: its next heartbeat finds it reaped and registers again.
		<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultHeartbeatInterval))
		h.clock.Advance(jobs.DefaultHeartbeatInterval)
		<-h.clock.WaitForTimerAt(t0.Add(2 * jobs.DefaultHeartbeatInterval)) // the beat is done
		require.NotEqual(t, first, w.ProcessID(), "registered again")

		// Job 2's lost run returns; the freed slot claims job 1 again, whose
		// lost run still goes on.
		close(unblock[2])
		require.Equal(t, []lostRunStart{{1, 2}}, receive(t, started, 1))
		// Job 1's lost run returns (its result is ignored, rightly); job 2
		// is claimed again and completes.
		close(unblock[1])
		require.Equal(t, []lostRunStart{{2, 2}}, receive(t, started, 1))

		// Shutdown: job 1's second run is still running and ignores its
		// context, so it must be released back to ready.
		stopPastItsTimeout(h, stop)
		j := h.job(a)
		require.Equal(t, engine.StateReady, j.State, "job 1, still running at shutdown, is released (it is %s for process %d)", j.State, j.ProcessID)
	})
}

// guarantees.md, "A worker that pauses": a worker presumed dead that comes
// back may claim before its heartbeat tells it it was reaped. Those jobs
// are its own: another process's reaper used to release them at once (they
// were running for a process whose row was gone), so they ran twice, and
// its shutdown released jobs under its new process id only, leaving those
// claimed under the old one running until the reaper found them.
func TestJobsAWorkerClaimsBeforeLearningItWasReapedRunOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		started := make(chan lostRunStart, 10)
		unblock := make(chan struct{})
		never := make(chan struct{}) // job 2 ignores its context until the test ends
		t.Cleanup(func() { close(never) })
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[waitJob]) error {
			started <- lostRunStart{j.Args.N, j.Attempt}
			if j.Args.N == 1 {
				<-unblock
			} else {
				<-never
			}
			return nil
		}))
		w := h.worker(jobs.WorkerConfig{Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		stop := h.run(w)
		<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultHeartbeatInterval))
		first := w.ProcessID()

		// Another process, with a short DeadAfter of its own, finds the
		// worker dead; the worker does not know yet and claims two jobs.
		n, err := h.store.ReapDeadProcesses(ctx, engine.At(t0.Add(time.Second)), 500*time.Millisecond)
		require.NoError(t, err)
		require.Zero(t, n)
		a, b := h.enqueue(waitJob{N: 1}), h.enqueue(waitJob{N: 2})
		require.ElementsMatch(t, []lostRunStart{{1, 1}, {2, 1}}, receive(t, started, 2))
		require.Equal(t, first, w.ProcessID(), "its heartbeat has not told it yet")

		// A reaper with the default DeadAfter leaves its jobs alone: they
		// have not run that long.
		n, err = h.store.ReapDeadProcesses(ctx, engine.At(t0.Add(time.Minute)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Zero(t, n, "jobs a live worker runs are not lost")
		close(unblock)

		// Its heartbeat finds it reaped; it registers again.
		h.clock.Advance(jobs.DefaultHeartbeatInterval)
		<-h.clock.WaitForTimerAt(t0.Add(2 * jobs.DefaultHeartbeatInterval))
		require.NotEqual(t, first, w.ProcessID(), "registered again")

		// At shutdown job 2, still running under the old id, is released.
		stopPastItsTimeout(h, stop)
		j := h.job(b)
		require.Equal(t, engine.StateReady, j.State, "job 2 is released (it is %s for process %d)", j.State, j.ProcessID)
		require.Equal(t, 0, j.Attempt, "its attempt is given back")
		require.Equal(t, engine.StateCompleted, h.job(a).State, "job 1's result counts: the claim was its worker's")
		require.Len(t, started, 0, "no job ran twice")
	})
}

// stopPastItsTimeout stops a worker whose jobs ignore their context: it
// moves the fake clock through the shutdown timeout and the grace second
// after it, so the jobs still running are released.
func stopPastItsTimeout(h *harness, stop func()) {
	now := h.clock.Now()
	go func() {
		<-h.clock.WaitForTimerAt(now.Add(jobs.DefaultShutdownTimeout))
		h.clock.Advance(jobs.DefaultShutdownTimeout)
		<-h.clock.WaitForTimerAt(now.Add(jobs.DefaultShutdownTimeout + time.Second))
		h.clock.Advance(time.Second)
	}()
	stop()
}

// lostReplyDB commits a claim's transaction and then reports an error, as
// when the connection drops (or the caller's context ends) after the
// server committed but before its reply arrived. after runs between the
// two.
type lostReplyDB struct {
	engine.DB
	armed atomic.Bool
	after func()
}

func (d *lostReplyDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lostReplyTx{Tx: tx, db: d}, nil
}

type lostReplyTx struct {
	engine.Tx
	db    *lostReplyDB
	claim bool
}

func (t *lostReplyTx) note(q string) {
	if strings.Contains(q, "attempt = attempt + 1") {
		t.claim = true
	}
}

func (t *lostReplyTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	t.note(q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *lostReplyTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	t.note(q)
	return t.Tx.Query(ctx, q, args...)
}

func (t *lostReplyTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.claim && t.db.armed.CompareAndSwap(true, false) {
		t.db.after()
		return fmt.Errorf("commit: %w", context.Canceled)
	}
	return nil
}

// guarantees.md, "Delivery: at least once": a claimed job runs at least
// once. A claim whose commit lands while its caller sees an error (the
// reply lost to a dropped connection, or to the context a shutdown
// cancels) once left its job running for a worker that never learned of
// it: with MaxAttempts(1) it failed as "process lost" without having run.
// The worker now releases, after a failed claim, the jobs running for it
// that it neither runs nor has a result for.
func TestAClaimWhoseCommitReplyIsLostLeavesNoJobUnrun(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		ran := make(chan struct{}, 2)
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			runs.Add(1)
			ran <- struct{}{}
			return nil
		}, jobs.MaxAttempts(1)))
		first := h.enqueue(waitJob{})
		worker := func(after func()) (*jobs.Worker, *lostReplyDB) {
			db := &lostReplyDB{DB: h.store.DB(), after: after}
			db.armed.Store(true)
			w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
				jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
			require.NoError(t, err)
			return w, db
		}

		// A worker stopping while its claim commits.
		ctx, cancel := context.WithCancel(context.Background())
		w, db := worker(cancel)
		require.NoError(t, w.Run(ctx))
		require.False(t, db.armed.Load(), "the claim ran")
		_, err := h.store.ReapDeadProcesses(context.Background(), engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		j := h.job(first)
		require.Equal(t, engine.StateReady, j.State, "released, not left for the reaper to fail as %q", j.LastError)
		require.Equal(t, 0, j.Attempt, "the attempt the claim counted is given back")
		require.Zero(t, runs.Load())

		// A live worker runs both jobs: it releases them after the failed
		// claim, and that release wakes it to claim them again (its poll
		// is an hour off, and the fake clock does not move).
		second := h.enqueue(waitJob{})
		w, db = worker(func() {})
		stop := h.run(w)
		receive(t, ran, 2)
		stop()
		require.False(t, db.armed.Load(), "the claim ran")
		require.Equal(t, int32(2), runs.Load())
		for _, id := range []int64{first, second} {
			require.Equal(t, engine.StateCompleted, h.job(id).State)
		}
	})
}

// guarantees.md, "A worker that pauses": "When it comes back it learns it
// was reaped, registers again, and the results of the runs it had in
// flight are ignored ... Jobs it claims after coming back, before its
// heartbeat tells it, are its own: their results count, its shutdown
// releases them".
//
// A worker presumed dead that claims, before its heartbeat tells it, the
// very job whose lost run it still has, runs that job twice under one
// process id. The lost run's failure is ignored. A result once carried
// only its process id, so it was recorded against the new run's claim:
// the job went back to scheduled (for a retry) while its new run still
// went on, so it would have run a third time beside it, and the new run's
// shutdown release found it gone. A result now also names the attempt its
// run was claimed at, which the new claim raised.
func TestALostRunsFailureLeavesTheRunThatReplacedItAlone(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		started := make(chan lostRunStart, 10)
		failLost := make(chan struct{})
		never := make(chan struct{}) // the new run ignores its context until the test ends
		t.Cleanup(func() { close(never) })
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[waitJob]) error {
			if j.Args.N != 1 {
				return nil // the marker job
			}
			started <- lostRunStart{j.Args.N, j.Attempt}
			if j.Attempt == 1 {
				<-failLost
				return errors.New("the lost run failed")
			}
			<-never
			return nil
		}))
		id := h.enqueue(waitJob{N: 1})
		w := h.worker(jobs.WorkerConfig{Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		stop := h.run(w)
		require.Equal(t, []lostRunStart{{1, 1}}, receive(t, started, 1))
		pid := w.ProcessID()

		// The worker pauses past DeadAfter; another process reaps it. The
		// reap's wake-up makes the worker, which does not know yet, claim
		// the job again under its old process id.
		n, err := h.store.ReapDeadProcesses(ctx, engine.At(t0.Add(10*time.Minute)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []lostRunStart{{1, 2}}, receive(t, started, 1))
		require.Equal(t, pid, w.ProcessID(), "its heartbeat has not told it yet")

		// Both slots are taken: a marker job waits. The lost run fails; its
		// slot then claims the marker, whose result is recorded after the
		// lost run's (one recorder, in order).
		marker := h.enqueue(waitJob{N: 2})
		close(failLost)
		require.Eventually(t, func() bool { return h.job(marker).State == engine.StateCompleted }, 20*time.Second, 5*time.Millisecond)

		j := h.job(id)
		require.Equal(t, engine.StateRunning, j.State,
			"the job's new run still goes on: the lost run's failure must be ignored (the job is %s, last error %q)", j.State, j.LastError)
		require.Equal(t, pid, j.ProcessID)

		// At shutdown the new run, still going on, is released.
		stopPastItsTimeout(h, stop)
		j = h.job(id)
		require.Equal(t, engine.StateReady, j.State, "released at shutdown (it is %s, last error %q)", j.State, j.LastError)
	})
}

// guarantees.md, "A worker that pauses": "the results of the runs it had in
// flight are ignored: a completion only counts for the process that holds
// the claim"; "Nothing lost": "A call that coalesces into a pending job is
// kept in that job (with Collect, every call's args)"; dashboard.md: every
// failed attempt is "kept with the job in sluice_attempts ... deleted with
// it".
//
// With DeleteOnComplete, the completion of a lost run (its worker was
// presumed dead and the job released) deletes nothing of the job: neither
// its row, nor its collected calls, nor its kept failed attempts. It once
// deleted the calls and the attempts all the same, so the job ran again
// with only its first call, and its history was gone.
func TestALostRunsCompletionKeepsTheCallsAndAttemptsOfItsJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		h.store.DeleteOnComplete = true
		runs := make(chan []string, 4)
		unblock := make(chan struct{})
		require.NoError(t, jobs.RegisterCalls(h.reg, func(_ context.Context, j *jobs.Job[pushSKU], calls []pushSKU) error {
			var skus []string
			for _, c := range calls {
				skus = append(skus, c.SKU)
			}
			runs <- skus
			switch j.Attempt {
			case 1:
				return errors.New("bulk endpoint 503")
			case 2:
				<-unblock // the run that will be presumed lost
			}
			return nil
		}, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect}),
			jobs.Backoff(func(int) time.Duration { return time.Second })))
		var id int64
		for _, sku := range []string{"a", "b", "c"} {
			id = h.enqueued(pushSKU{Shop: 1, SKU: sku}).ID
		}
		// The first attempt fails and is kept.
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		require.Equal(t, []string{"a", "b", "c"}, <-runs)
		before, err := h.store.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, before, 1, "the failed attempt is kept")
		h.clock.Advance(time.Second)
		_, _, err = h.store.Promote(ctx, engine.HostTime(h.clock.Now), 100)
		require.NoError(t, err)

		// A worker runs the second attempt; it is stopping when another
		// process, finding its heartbeat old (it paused), releases the job.
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour, JobTimeout: -1})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		require.Equal(t, []string{"a", "b", "c"}, receive(t, runs, 1)[0])
		now := h.clock.Now()
		cancel()
		<-h.clock.WaitForTimerAt(now.Add(jobs.DefaultShutdownTimeout)) // it stopped claiming
		n, err := h.store.ReapDeadProcesses(ctx, engine.At(now.Add(10*time.Minute)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		// The lost run completes: its result is written, and must change
		// nothing.
		close(unblock)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not stop")
		}
		j := h.job(id)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 3, j.Calls)

		attempts, err := h.store.Attempts(ctx, id)
		require.NoError(t, err)
		var kept []string
		for _, a := range attempts {
			kept = append(kept, a.Error)
		}
		assert.Contains(t, kept, "bulk endpoint 503", "the first attempt's error is kept with the job, which still exists")

		// The job runs again, with every call.
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []string{"a", "b", "c"}, <-runs, "every call's args reach the handler")
	})
}

// guarantees.md, "Nothing lost": "Errors on the connection are retried until
// the results land"; dashboard.md: the job page shows "every failed
// attempt with its error", kept in sluice_attempts.
//
// A batch whose commit landed but whose reply was lost (a dropped
// connection) is written again. The job no longer runs for the process,
// so the batch written again changes nothing. The failed run's error was
// once inserted into sluice_attempts a second time all the same: one
// failed run showed as two.
func TestAResultBatchWrittenAgainKeepsOneAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			return errors.New("upstream 503")
		}))
		id := h.enqueue(waitJob{})
		db := &lostFinishReplyDB{DB: h.store.DB(), rewritten: make(chan struct{}, 1)}
		db.armed.Store(true)
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
		require.NoError(t, err)
		stop := h.run(w)
		select {
		case <-db.rewritten: // the batch, written again, landed
		case <-time.After(30 * time.Second):
			t.Fatal("the results were not written again")
		}
		stop()
		require.False(t, db.armed.Load(), "the first write's reply was lost")

		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 1, j.Attempt)
		attempts, err := h.store.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, attempts, 1, "one failed run, one kept attempt: %+v", attempts)
	})
}

// lostFinishReplyDB commits the first transaction that records a failed
// run (Finish) and then reports a connection error, as when the reply to
// the COMMIT is lost. rewritten receives once the next such commit (the
// batch written again) lands.
type lostFinishReplyDB struct {
	engine.DB
	armed     atomic.Bool
	rewritten chan struct{}
}

func (d *lostFinishReplyDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lostFinishReplyTx{Tx: tx, db: d}, nil
}

type lostFinishReplyTx struct {
	engine.Tx
	db     *lostFinishReplyDB
	finish bool
}

// note marks a transaction that records results with a failed run: the
// first keeps it (sluice_attempts), and every one moves the job (SetJobs,
// whose rows carry new_error), the one written again too.
func (t *lostFinishReplyTx) note(q string) {
	if strings.Contains(q, "INSERT INTO sluice_attempts") || strings.Contains(q, "new_error") {
		t.finish = true
	}
}

func (t *lostFinishReplyTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	t.note(q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *lostFinishReplyTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	t.note(q)
	return t.Tx.Query(ctx, q, args...)
}

func (t *lostFinishReplyTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if !t.finish {
		return nil
	}
	if t.db.armed.CompareAndSwap(true, false) {
		return errors.New("commit: read tcp 10.0.0.7:5432: connection reset by peer")
	}
	select {
	case t.db.rewritten <- struct{}{}:
	default:
	}
	return nil
}
