package jobs_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Delivery: at least once": a process is presumed dead
// when it stops heartbeating ("SIGKILL, OOM, a lost host", or "a worker
// that pauses longer than DeadAfter"), and operations.md: "--dead-after
// must be at least 3 × --heartbeat, or a live process would be presumed
// dead between two of its heartbeats and its jobs run twice".
//
// A process's heartbeat loop also reaps the others (heartbeat.Beat:
// Heartbeat, then ReapDeadProcesses), and a reap gives a dead process's
// slot back. While an app's transaction holds that semaphore (an
// EnqueueTx of the same key, not yet committed), a reap that waited for
// it would stop the live worker's beats: once DeadAfter passed so, the
// next reaper (a dispatcher) would presume the live worker dead and
// release the job it is running, which would run twice though the worker
// never paused. The lock need not be the app's: a worker whose host is
// lost in the middle of a finish holds its semaphore until the database
// notices the dead connection (TCP keepalive: two hours by Linux's
// defaults). So the reap waits for no semaphore: it leaves the dead
// worker's job to a later reap, which releases it once the lock is gone.
// (On SQLite an open transaction stops every write, heartbeats included.)
func TestAWorkerWhoseReapMeetsALockedSemaphoreIsNotPresumedDead(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction of the app's stops every write, heartbeats included")
		}
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[accountJob]) error { return nil },
			jobs.MaxAttempts(1), jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }})))
		started, release := make(chan int64, 1), make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			started <- j.ID
			<-release
			return nil
		}))

		// A worker killed while it ran the last attempt of account 1's job,
		// which holds the key's slot: its reaper gives the slot back.
		dead, err := h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "killed"}, engine.At(t0))
		require.NoError(t, err)
		lost := h.enqueue(accountJob{Account: 1})
		cl, err := h.store.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)
		require.Equal(t, lost, cl.Jobs[0].ID)

		// A live worker runs a long job.
		long := h.enqueue(noop{})
		// Its statements are watched for its reap's look at the semaphore.
		rs, rec := testdb.Record(h.store)
		var reaping atomic.Bool
		reached := make(chan struct{})
		var once sync.Once
		rec.Before = func(q string) {
			switch {
			case strings.Contains(q, "FROM sluice_processes") && strings.Contains(q, "heartbeat_at <"):
				reaping.Store(true)
			case reaping.Load() && strings.Contains(q, "sluice_semaphores"):
				once.Do(func() { close(reached) })
			}
		}
		// No job timeout: the long job's (a minute by default, as the
		// heartbeat) would be a second timer due at 12:01, which could
		// meet the wait below for the worker's first beat.
		w, err := jobs.NewWorker(testdb.Public(rs), h.reg, jobs.WorkerConfig{Concurrency: 1, PollInterval: time.Hour, JobTimeout: -1, Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		require.Equal(t, long, <-started)

		// The app enqueues a job of account 1 in a transaction of its own,
		// still open: it holds the key's semaphore.
		tx, commit, rollback := callerTx(t, h.store)
		_, err = h.client.EnqueueTx(ctx, tx, accountJob{Account: 1, N: 2})
		require.NoError(t, err)
		ended := false
		defer func() {
			if !ended {
				rollback()
			}
		}()

		// Six minutes on, the worker's beat finds the killed worker dead and
		// reaps it: it reaches the semaphore the app's transaction holds.
		for m := 1; m <= 6; m++ {
			<-h.clock.WaitForTimerAt(t0.Add(time.Duration(m) * time.Minute))
			h.clock.Advance(time.Minute)
		}
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Fatal("the worker's beat did not reap the killed worker")
		}

		// Six more minutes, and the beat due meanwhile is over: the worker
		// still runs its job, alive. Another process (a dispatcher) looks
		// for dead processes, as its beat does.
		h.clock.Advance(6 * time.Minute)
		select {
		case <-h.clock.WaitForTimerAt(t0.Add(13 * time.Minute)):
		case <-time.After(30 * time.Second):
			t.Fatal("the worker's beat is stuck in its reap: it stamps no heartbeat")
		}
		_, err = h.store.ReapDeadProcesses(ctx, engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		j := h.job(long)
		if j.State != engine.StateRunning || j.LastError == engine.LostError {
			t.Errorf("the live worker's job is %s (%q): it was presumed lost while its worker ran it, and runs again", j.State, j.LastError)
		}
		require.Equal(t, engine.StateRunning, h.job(lost).State, "the killed worker's job waits for its semaphore")

		// The app commits: the next reap fails the killed worker's job (its
		// last attempt lost) and gives its slot to the app's job.
		commit()
		ended = true
		_, err = h.store.ReapDeadProcesses(ctx, engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		j = h.job(lost)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, engine.LostError, j.LastError)
		ps, err := h.store.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the killed worker is removed; the live one stays")
		close(release)
	})
}
