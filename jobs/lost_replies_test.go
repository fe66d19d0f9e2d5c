package jobs_test

import (
	"context"
	"fmt"
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

type connSlotJob struct{ N int }

func (connSlotJob) Kind() string { return "conn_slot_job" }

// guarantees.md, "Nothing lost": "a batch written again after its first
// commit landed (the reply lost) changes nothing more: each ... slot ...
// held back once"; "Limits": a slot is "given back once".
//
// The completion batch that gives a concurrency slot back (and hands it to
// the next blocked job) lands, its reply lost; the worker writes it again.
// The slot is given back once, one job of the key runs at a time,
// every job runs once, and the semaphore ends with no holder.
func TestALostCompletionReplyGivesTheSlotBackOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		running, most := 0, 0
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connSlotJob]) error {
			mu.Lock()
			defer mu.Unlock()
			runs[j.Args.N]++
			running++
			most = max(most, running)
			running--
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[connSlotJob]{Key: "one", To: 1})))
		s, db, client := lossStore(h)
		var fired atomic.Bool
		db.loseReply = func(stmts []string) bool {
			return has(stmts, "state = 'completed'") && fired.CompareAndSwap(false, true)
		}
		for n := 1; n <= 3; n++ {
			_, err := client.Enqueue(context.Background(), connSlotJob{N: n})
			require.NoError(t, err)
		}
		sem := semaphoreState(t, h.store)
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 2, sem.Blocked)

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Second})
		require.NoError(t, err)
		stop := h.run(w)
		completed := func() int {
			js, err := h.store.ListJobs(context.Background(), engine.JobFilter{State: engine.StateCompleted, Limit: 10})
			require.NoError(t, err)
			return len(js)
		}
		waitFor(t, h, time.Second, func() bool { return completed() == 3 }, func() string {
			return fmt.Sprintf("%d of 3 jobs completed; semaphore %+v", completed(), semaphoreState(t, h.store))
		})
		stop()
		require.True(t, fired.Load(), "a completion's reply was lost")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, runs, "every job ran once")
		require.Equal(t, 1, most)
		sem = semaphoreState(t, h.store)
		require.Zero(t, sem.Held, "the slot was given back once: %+v", sem)
		require.Zero(t, sem.Holding)
		require.Zero(t, sem.Blocked)
	})
}

// guarantees.md, "Nothing lost": "A caller that retries a failed
// EnqueueMany creates no duplicates, since nothing was written — except
// when the error came after the commit landed (its reply lost to a dropped
// connection), which no client can tell apart".
//
// As documented, the caller gets the connection's error for a job
// that was written (plain: one autocommitted insert; with a concurrency
// slot: a transaction), and a retry writes a second one. The second takes
// its place in the semaphore: the key counts exactly its one holder, the
// other job waits blocked, and both run.
func TestAnEnqueueWhoseReplyIsLostWasWritten(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error { runs.Add(1); return nil }))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connSlotJob]) error { runs.Add(1); return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[connSlotJob]{Key: "one", To: 1})))
		_, db, client := lossStore(h)
		db.loseReply = func(stmts []string) bool { return has(stmts, insertJobs) }
		_, err := client.Enqueue(ctx, connJob{N: 1})
		require.ErrorIs(t, err, errConnReset, "the caller sees the lost reply")
		_, err = client.Enqueue(ctx, connSlotJob{N: 1})
		require.ErrorIs(t, err, errConnReset, "the caller sees the lost reply")
		db.mu.Lock()
		db.loseReply = nil
		db.mu.Unlock()
		js, err := h.store.ListJobs(ctx, engine.JobFilter{Limit: 10})
		require.NoError(t, err)
		require.Len(t, js, 2, "both jobs were written all the same")

		// The caller retries the limited one: a second job, documented.
		_, err = client.Enqueue(ctx, connSlotJob{N: 1})
		require.NoError(t, err)
		sem := semaphoreState(t, h.store)
		require.Equal(t, 1, sem.Held, "%+v", sem)
		require.Equal(t, 1, sem.Holding)
		require.Equal(t, 1, sem.Blocked)
		require.Equal(t, 3, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, int32(3), runs.Load())
		sem = semaphoreState(t, h.store)
		require.Zero(t, sem.Held)
		require.Zero(t, sem.Blocked)
	})
}

// guarantees.md, "Graceful shutdown": jobs still running when the shutdown
// timeout runs out are released back to ready, giving back the attempt,
// and reported to OnFinish as released. So it is when the release's commit
// lands and its reply is lost: the job is ready, at attempt 0, and reported
// released once; then it runs.
func TestAReleaseWhoseReplyIsLostReleasedTheJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{}, 1)
		never := make(chan struct{})
		t.Cleanup(func() { close(never) })
		var first atomic.Bool
		first.Store(true)
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			if first.CompareAndSwap(true, false) {
				started <- struct{}{}
				<-never // ignores its context
			}
			return nil
		}))
		s, db, client := lossStore(h)
		var lostRelease atomic.Bool
		db.loseReply = func(stmts []string) bool {
			// Release locks its runs (LockRuns) and gives the attempt back.
			return has(stmts, "SELECT id, claims, queue, holds_slot") && lostRelease.CompareAndSwap(false, true)
		}
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		var mu sync.Mutex
		var outcomes []jobs.Outcome
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour,
			Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { mu.Lock(); outcomes = append(outcomes, e.Outcome); mu.Unlock() }}})
		require.NoError(t, err)
		stop := h.run(w)
		<-started
		stopPastItsTimeout(h, stop)
		require.True(t, lostRelease.Load(), "the release's reply was lost")
		j := h.job(res.ID)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 0, j.Attempt, "the attempt given back")
		mu.Lock()
		require.Equal(t, []jobs.Outcome{jobs.OutcomeReleased}, outcomes)
		mu.Unlock()
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}
