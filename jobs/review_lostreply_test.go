package jobs_test

// Lost replies on the heartbeat's paths, and on the results that give an
// attempt back (a 429, a snooze) or retry it, written through a worker.
// connLossDB (connloss_db_test.go) commits and then reports a dropped
// connection.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// insertProcess marks RegisterProcess's statement.
const insertProcess = "INSERT INTO sluice_processes"

// guarantees.md, "Graceful shutdown": a drain "that learns it was
// [presumed dead] anyway (it stalled) runs no more of the claim it had
// made: those jobs went back to ready, and it claims them again."
//
// The drain stalls; another process presumes it dead and releases its
// claim of three jobs. The drain's heartbeat learns it was reaped and
// registers again, but that registration's reply is lost (its row is
// written; a plain failure does the same). The drain then knows it was
// reaped, yet goes on running the rest of its lost claim under the old
// process id, whose results are ignored (those jobs were released), and
// then claims and runs them again: jobs 2 and 3 run twice where the doc
// says they run once.
func TestADrainWhoseRegistrationAgainFailsRunsNoMoreOfItsLostClaim(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var mu sync.Mutex
		runs := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
			mu.Lock()
			runs[j.Args.N]++
			first := runs[j.Args.N] == 1
			mu.Unlock()
			if j.Args.N == 1 && first {
				// The drain stalls: another process, an hour on, presumes
				// it dead and releases its claim. A minute later the
				// drain's heartbeat is due, and tells it.
				n, err := h.store.ReapDeadProcesses(ctx, engine.At(h.clock.Now().Add(time.Hour)), jobs.DefaultDeadAfter)
				assertNoErr(t, err)
				if n != 3 {
					t.Errorf("the reap released %d jobs, not the claim's 3", n)
				}
				h.clock.Advance(time.Minute)
			}
			return nil
		}))
		s, db, client := lossStore(h)
		inserts := 0 // under db.mu
		db.loseReply = func(stmts []string) bool {
			if has(stmts, insertProcess) {
				inserts++
				return inserts == 2 // the registration again
			}
			return false
		}
		for n := 1; n <= 3; n++ {
			_, err := client.Enqueue(ctx, connJob{N: n})
			require.NoError(t, err)
		}
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), JobTimeout: -1})
		require.NoError(t, err)
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		db.mu.Lock()
		require.GreaterOrEqual(t, inserts, 2, "the drain registered again")
		db.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 2, 2: 1, 3: 1}, runs,
			"the jobs of the lost claim not run yet run once: the drain learned it was presumed dead, though it could not register again")
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
