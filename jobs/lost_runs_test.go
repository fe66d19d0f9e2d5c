package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
