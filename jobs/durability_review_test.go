package jobs_test

import (
	"context"
	"errors"
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

// guarantees.md, "A worker that pauses": "When it comes back it learns it
// was reaped, registers again, and the results of the runs it had in
// flight are ignored ... Jobs it claims after coming back, before its
// heartbeat tells it, are its own: their results count, its shutdown
// releases them".
//
// A worker presumed dead that claims, before its heartbeat tells it, the
// very job whose lost run it still has, runs that job twice under one
// process id. The lost run's failure must be ignored; it is recorded
// instead, against the new run's claim: the job goes back to scheduled
// (for a retry) while its new run is still going on, so it would run a
// third time beside it, and the new run's shutdown release finds it gone.
func TestReviewALostRunsFailureLeavesTheRunThatReplacedItAlone(t *testing.T) {
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
// presumed dead and the job released) deletes nothing of the job's row,
// rightly, but deletes its collected calls and its kept failed attempts
// all the same: the job runs again with only its first call, and its
// history is gone.
func TestReviewALostRunsCompletionKeepsTheCallsAndAttemptsOfItsJob(t *testing.T) {
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
// connection) is written again. Moving the job again is harmless (it no
// longer runs for the process), but the failed run's error is inserted
// into sluice_attempts a second time: one failed run shows as two.
func TestReviewAResultBatchWrittenAgainKeepsOneAttempt(t *testing.T) {
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
// the COMMIT is lost. rewritten receives once the next such commit lands.
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

func (t *lostFinishReplyTx) note(q string) {
	if strings.Contains(q, "INSERT INTO sluice_attempts") {
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

// Probe (passes): guarantees.md, "Nothing lost": "Errors on the connection
// are retried until the results land"; a worker whose database goes away
// for a while keeps the results of the jobs that finished meanwhile, writes
// them when it comes back, and claims again.
func TestReviewResultsOfAnOutageLandWhenTheDatabaseComesBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 3)
		finish := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[waitJob]) error {
			started <- j.Args.N
			if ch := finish[j.Args.N]; ch != nil {
				<-ch
			}
			return nil
		}))
		a, b := h.enqueue(waitJob{N: 1}), h.enqueue(waitJob{N: 2})
		db := &outageDB{DB: h.store.DB()}
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		require.NoError(t, err)
		stop := h.run(w)
		require.ElementsMatch(t, []int{1, 2}, receive(t, started, 2))

		// The database goes away; both jobs finish meanwhile, and the claim
		// their freed slots make fails.
		db.down.Store(true)
		close(finish[1])
		close(finish[2])
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second)) // the failed claim's back-off
		require.True(t, db.refused.Load() > 0)
		for _, id := range []int64{a, b} {
			require.Equal(t, engine.StateRunning, h.job(id).State)
		}
		c := h.enqueue(waitJob{N: 3})

		// It comes back: the results land, and the next claim takes the new job.
		db.down.Store(false)
		h.clock.Advance(5 * time.Second)
		require.Equal(t, []int{3}, receive(t, started, 1))
		require.Eventually(t, func() bool {
			for _, id := range []int64{a, b, c} {
				if h.job(id).State != engine.StateCompleted {
					return false
				}
			}
			return true
		}, 30*time.Second, 5*time.Millisecond)
		stop()
		for _, id := range []int64{a, b, c} {
			require.Equal(t, 1, h.job(id).Attempt)
		}
	})
}

// outageDB refuses every statement while down is set, as a database that
// went away does.
type outageDB struct {
	engine.DB
	down    atomic.Bool
	refused atomic.Int32
}

var errOutage = errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")

func (d *outageDB) check() error {
	if d.down.Load() {
		d.refused.Add(1)
		return errOutage
	}
	return nil
}

func (d *outageDB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := d.check(); err != nil {
		return engine.Result{}, err
	}
	return d.DB.Exec(ctx, q, args...)
}

func (d *outageDB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Query(ctx, q, args...)
}

func (d *outageDB) Begin(ctx context.Context) (engine.Tx, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Begin(ctx)
}
