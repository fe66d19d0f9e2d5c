package jobs_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/sluicequeue/sluice/ratelimit"
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

// guarantees.md, "A worker that dies ... stops heartbeating" and only then
// is presumed dead. A heartbeat whose stamp lands and whose reply is lost
// is a heartbeat all the same: a worker whose every heartbeat reply is
// lost for ten minutes is not presumed dead, does not register again
// (which would leave its first row to be reaped, and release the jobs it
// runs), and the result of its long job counts.
func TestHeartbeatsWhoseRepliesAreLostKeepAWorkerAlive(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		started := make(chan struct{}, 1)
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			started <- struct{}{}
			<-unblock
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		var lost atomic.Int32
		db.loseReply = func(stmts []string) bool {
			if has(stmts, "SET heartbeat_at") {
				lost.Add(1)
				return true
			}
			return false
		}
		res, err := client.Enqueue(ctx, connJob{N: 1})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour, JobTimeout: -1})
		require.NoError(t, err)
		stop := h.run(w)
		receive(t, started, 1)
		pid := w.ProcessID()
		for i := 1; i <= 10; i++ {
			<-h.clock.WaitForTimerAt(t0.Add(time.Duration(i) * jobs.DefaultHeartbeatInterval))
			h.clock.Advance(jobs.DefaultHeartbeatInterval)
		}
		<-h.clock.WaitForTimerAt(t0.Add(11 * jobs.DefaultHeartbeatInterval)) // the tenth beat is over
		require.GreaterOrEqual(t, lost.Load(), int32(10), "every heartbeat's reply was lost")
		n, err := h.store.ReapDeadProcesses(ctx, engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Zero(t, n, "a worker whose heartbeats landed is not presumed dead")
		require.Equal(t, pid, w.ProcessID(), "it did not register again")
		ps, err := h.store.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "one process row")
		close(unblock)
		waitFor(t, h, time.Millisecond, func() bool { return h.job(res.ID).State == engine.StateCompleted }, func() string {
			j := h.job(res.ID)
			return "the job is " + string(j.State) + ": " + j.LastError
		})
		stop()
	})
}

type lr429 struct{ N int }

func (lr429) Kind() string { return "lr_429" }

type lrSnooze struct{ N int }

func (lrSnooze) Kind() string { return "lr_snooze" }

type lrFail struct{ N int }

func (lrFail) Kind() string { return "lr_fail" }

// lrState is what a result wrote of a job.
type lrState struct {
	State   engine.State
	Attempt int
	RunAt   time.Time
	TAT     int64 // the 429's budget
}

// guarantees.md, "Nothing lost": "a batch written again after its first
// commit landed (the reply lost) changes nothing more: each failed run is
// kept once, each slot and each budget held back once"; "Retries, cancel
// and snooze": a snooze and a 429 run the job again "without counting the
// attempt"; the waits are counted from the transaction that records them.
//
// Through a worker (a drain, which writes each job's result as it ends):
// a 429 (RetryAfter), a snooze and a failure to retry each have their
// first write land with its reply lost, and the clock moves on ten seconds
// before the recorder writes it again. The write again changes nothing:
// each job keeps the state, attempt and run time its first write gave it,
// the budget is held back once (its TAT as the first write left it), the
// failed run is kept once, and the drain counts each outcome once.
func TestResultsThatGiveTheAttemptBackWrittenAgainChangeNothing(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[lr429]) error { return jobs.RetryAfter(time.Minute) },
			jobs.RateLimit(ratelimit.Limit[lr429]{To: 10, Per: time.Minute, Key: "api"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[lrSnooze]) error { return jobs.Snooze(time.Minute) }))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[lrFail]) error { return errors.New("upstream 503") },
			jobs.Backoff(func(int) time.Duration { return time.Minute })))
		s, db, client := lossStore(h)
		names := []string{"429", "snooze", "fail"} // the drain runs them in this order
		ids := map[string]int64{}
		for i, args := range []jobs.Args{lr429{}, lrSnooze{}, lrFail{}} {
			res, err := client.Enqueue(ctx, args)
			require.NoError(t, err)
			ids[names[i]] = res.ID
		}
		snapshot := func() map[int64]lrState {
			out := map[int64]lrState{}
			for _, id := range ids {
				j := h.job(id)
				st := lrState{State: j.State, Attempt: j.Attempt, RunAt: j.RunAt}
				if id == ids["429"] {
					st.TAT = budget(t, h, "lr_429/api").TAT
				}
				out[id] = st
			}
			return out
		}
		// Each first write of a result lands, its reply lost; the clock
		// moves on before the recorder writes it again.
		var firsts []map[int64]lrState
		writes := 0 // under db.mu
		db.loseReply = func(stmts []string) bool {
			if !has(stmts, "new_error") {
				return false
			}
			writes++
			if writes%2 == 0 {
				return false
			}
			firsts = append(firsts, snapshot())
			h.clock.Advance(10 * time.Second)
			return true
		}
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		res, err := w.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, jobs.DrainResult{Throttled: 1, Snoozed: 1, Retried: 1}, res)
		db.mu.Lock()
		require.Equal(t, 6, writes, "three results, each written twice")
		db.mu.Unlock()
		require.Len(t, firsts, 3)

		final := snapshot()
		for i, name := range names {
			id := ids[name]
			require.Equal(t, firsts[i][id], final[id], "the %s's result written again changed nothing", name)
		}
		require.Equal(t, engine.StateScheduled, final[ids["429"]].State)
		require.Zero(t, final[ids["429"]].Attempt, "a 429 gives its attempt back, once")
		require.Zero(t, final[ids["snooze"]].Attempt, "a snooze gives its attempt back, once")
		require.Equal(t, 1, final[ids["fail"]].Attempt)
		as, err := h.store.Attempts(ctx, ids["fail"])
		require.NoError(t, err)
		require.Len(t, as, 1, "the failed run is kept once")
		for _, name := range []string{"429", "snooze"} {
			as, err := h.store.Attempts(ctx, ids[name])
			require.NoError(t, err)
			require.Empty(t, as, "a %s is no failed attempt", name)
		}
	})
}

// The heartbeat's own look for dead processes, made by a worker whose
// connection drops at the reap's commit: the reap lands, its reply is
// lost, and the worker logs it and beats on. The dead process's job was
// released once, its lost run counted once, and it runs on this worker.
func TestAWorkersReapWhoseReplyIsLostReleasesTheDeadProcessesJobsOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ran := make(chan int, 4)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
			ran <- j.Attempt
			return nil
		}))
		id := h.enqueue(connJob{N: 1})
		// A process that claims the job and dies at once.
		dead, err := h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.HostTime(h.clock.Now))
		require.NoError(t, err)
		cl, err := h.store.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.HostTime(h.clock.Now)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)

		s, db, _ := lossStore(h)
		var lostReap atomic.Bool
		db.loseReply = func(stmts []string) bool {
			return has(stmts, "INSERT INTO sluice_attempts") && lostReap.CompareAndSwap(false, true)
		}
		h.clock.Advance(10 * time.Minute)
		// Its poll comes after two beats: the job the reap released is
		// claimed then at the latest (the reap whose reply was lost wakes
		// no worker of this process).
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: 5 * time.Minute})
		require.NoError(t, err)
		stop := h.run(w)
		start := h.clock.Now()
		for i := 1; i <= 2; i++ { // two beats: the first reap's reply is lost
			<-h.clock.WaitForTimerAt(start.Add(time.Duration(i) * jobs.DefaultHeartbeatInterval))
			h.clock.Advance(jobs.DefaultHeartbeatInterval)
		}
		<-h.clock.WaitForTimerAt(start.Add(3 * jobs.DefaultHeartbeatInterval)) // the second beat is over
		waitFor(t, h, 10*time.Second, func() bool { return h.job(id).State == engine.StateCompleted }, func() string {
			return "job is " + string(h.job(id).State)
		})
		stop()
		require.True(t, lostReap.Load(), "the reap's reply was lost")
		require.Equal(t, []int{2}, receive(t, ran, 1), "the job ran again, its lost run counted once")
		require.Empty(t, ran, "it ran once more")
		as, err := h.store.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, as, 1, "the lost run is kept once")
		require.True(t, strings.HasPrefix(as[0].Error, "process lost"), as[0].Error)
	})
}
