package jobs_test

import (
	"context"
	"fmt"
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

// guarantees.md, "Delivery: at least once": "A claim whose outcome is
// unknown (its commit landed, but the reply was lost to a dropped
// connection ...) leaves no job behind: after any failed claim the worker
// releases ... the jobs running for it that it neither runs nor has a
// result for."
//
// A connection that drops usually stays down a moment: the release that
// follows the failed claim fails too. The worker tries it again before its
// next claim round: the job the lost claim took goes back to ready, and
// runs (here in the round that claims the next job), instead of staying
// running, unrun, for the live process until it stops, and then being
// failed by the reaper as a lost run (MaxAttempts(1)) that never ran.
func TestAStrayOfALostClaimRunsWhenItsFirstReleaseFails(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := make(chan int, 10)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
			ran <- j.Args.N
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		lostClaim := false // under db.mu, as both predicates run
		loseClaim := once(func(stmts []string) bool { return has(stmts, markRunning) })
		db.loseReply = func(stmts []string) bool {
			if loseClaim(stmts) {
				lostClaim = true
				return true
			}
			return false
		}
		// The connection is still down when the worker looks for strays.
		var failedRelease atomic.Bool
		db.failStmt = func(q string) bool {
			return lostClaim && strings.Contains(q, lockRunning) && failedRelease.CompareAndSwap(false, true)
		}
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		first := res.ID

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		// The failed claim's back-off (min(PollInterval<<1, 5s)) is due.
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second))
		require.True(t, failedRelease.Load(), "the release after the lost claim failed")
		j := h.job(first)
		require.Equal(t, engine.StateRunning, j.State, "the lost claim landed")

		// The connection is back: the next round releases job 1 before it
		// claims, and runs it with job 2.
		_, err = client.Enqueue(context.Background(), connJob{N: 2})
		require.NoError(t, err)
		h.clock.Advance(5 * time.Second)
		require.ElementsMatch(t, []int{1, 2}, receive(t, ran, 2))
		waitFor(t, h, time.Second, func() bool { return h.job(first).State == engine.StateCompleted }, func() string {
			j := h.job(first)
			return fmt.Sprintf("job %d is %s for process %d (the worker's is %d), attempt %d", first, j.State, j.ProcessID, w.ProcessID(), j.Attempt)
		})
		require.Equal(t, 1, h.job(first).Attempt, "one attempt: the lost claim's was given back")
	})
}

// The release of a failed claim's strays, tried again before each round
// while it fails, touches none of the jobs the worker holds: one it runs,
// and one that ran and whose result is not written yet. Only the lost
// claim's job goes back to ready; every job runs once.
func TestAPendingStrayReleaseLeavesTheWorkersOwnJobsAlone(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		started := make(chan int, 10)
		unblock := make(chan struct{})
		release := sync.OnceFunc(func() { close(unblock) })
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
			mu.Lock()
			runs[j.Args.N]++
			mu.Unlock()
			started <- j.Args.N
			if j.Args.N == 1 {
				<-unblock // ignores its context: it runs until the test lets it go
			}
			return nil
		}))
		s, db, client := lossStore(h)
		// One round per wake-up: a second one, woken by PostgreSQL's
		// notification of job 2's enqueue, would release the stray before
		// the test sees it running.
		db.deaf = true
		// Job 3's result cannot be written (the connection fails at its
		// completion) until holdResults is cleared.
		holdResults := true
		lostClaim := false // under db.mu, as the predicates run
		var armed atomic.Bool
		loseClaim := once(func(stmts []string) bool { return armed.Load() && has(stmts, markRunning) })
		db.loseReply = func(stmts []string) bool {
			if loseClaim(stmts) {
				lostClaim = true
				return true
			}
			return false
		}
		var failedRelease atomic.Bool
		db.failStmt = func(q string) bool {
			switch {
			case holdResults && strings.Contains(q, "state = 'completed'"):
				return true
			case lostClaim && strings.Contains(q, lockRunning):
				return failedRelease.CompareAndSwap(false, true)
			}
			return false
		}
		enqueue := func(n int) int64 {
			res, err := client.Enqueue(context.Background(), connJob{N: n})
			require.NoError(t, err)
			return res.ID
		}
		running, unwritten := enqueue(1), enqueue(3)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour, Concurrency: 3})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		defer release() // before stop: job 1 ends even if the test fails
		require.ElementsMatch(t, []int{1, 3}, receive(t, started, 2))

		// The next claim lands, its reply lost; the release after it fails.
		armed.Store(true)
		stray := enqueue(2)
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second))
		require.True(t, failedRelease.Load())
		require.Equal(t, engine.StateRunning, h.job(stray).State)

		// The next round releases the stray, and claims and runs it.
		h.clock.Advance(5 * time.Second)
		require.Equal(t, []int{2}, receive(t, started, 1))
		for _, id := range []int64{running, unwritten} {
			j := h.job(id)
			require.Equal(t, engine.StateRunning, j.State, "job %d is the worker's: left alone", id)
			require.Equal(t, w.ProcessID(), j.ProcessID)
			require.Equal(t, 1, j.Attempt)
		}

		db.mu.Lock()
		holdResults = false
		db.mu.Unlock()
		release()
		completed := func() int {
			js, err := h.store.ListJobs(context.Background(), engine.JobFilter{State: engine.StateCompleted, Limit: 10})
			require.NoError(t, err)
			return len(js)
		}
		waitFor(t, h, time.Second, func() bool { return completed() == 3 }, func() string {
			return fmt.Sprintf("%d of 3 jobs completed", completed())
		})
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, runs, "every job ran once")
		for _, id := range []int64{running, unwritten, stray} {
			require.Equal(t, 1, h.job(id).Attempt, "job %d", id)
		}
	})
}

// A worker that stops while the release of a failed claim's strays still
// fails tries it once more before it deregisters: the stray goes back to
// ready, its attempt given back, instead of waiting for the reaper to fail
// it (MaxAttempts(1)) as a lost run that never ran.
func TestAWorkerReleasesAFailedClaimsStraysAtShutdown(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			runs.Add(1)
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		down := false // under db.mu: the connection is down once the claim's reply is lost
		loseClaim := once(func(stmts []string) bool { return has(stmts, markRunning) })
		db.loseReply = func(stmts []string) bool {
			if loseClaim(stmts) {
				down = true
				return true
			}
			return false
		}
		var failedReleases atomic.Int32
		db.failStmt = func(q string) bool {
			if down && strings.Contains(q, lockRunning) {
				failedReleases.Add(1)
				return true
			}
			return false
		}
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
		require.NoError(t, err)
		stop := h.run(w)
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second))
		require.EqualValues(t, 1, failedReleases.Load())
		require.Equal(t, engine.StateRunning, h.job(res.ID).State)

		db.mu.Lock()
		down = false
		db.mu.Unlock()
		stop()
		require.Zero(t, runs.Load())
		j := h.job(res.ID)
		require.Equal(t, engine.StateReady, j.State, "released at shutdown, not left %s for process %d", j.State, j.ProcessID)
		require.Equal(t, 0, j.Attempt)
		_, err = h.store.ReapDeadProcesses(context.Background(), engine.At(t0.Add(time.Hour)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed, "it runs")
	})
}

// Same promise, through Drain (documented as making "the same claims ...
// as Run"): a claim whose commit landed but whose reply was lost makes
// Drain return the error; the job the claim took is released first, not
// left running for the drain's process, which Drain then deregisters (the
// reaper would count it as a lost attempt: with MaxAttempts(1) the job
// would fail as "process lost" without ever having run).
func TestDrainReleasesTheJobsOfAClaimWhoseReplyIsLost(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			runs.Add(1)
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.ErrorIs(t, err, errConnReset, "the drain reports the failed claim")
		require.Zero(t, runs.Load())

		j := h.job(res.ID)
		require.Equal(t, engine.StateReady, j.State,
			"the job of the lost claim is released, not left %s for the deregistered process %d", j.State, j.ProcessID)
		require.Equal(t, 0, j.Attempt, "its attempt given back")
	})
}

// What it costs otherwise: the reaper that follows the drain's end fails
// the never-run job as a lost run.
func TestADrainsLostClaimIsNotFailedAsAProcessLost(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error { return nil }, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.Error(t, err)
		_, err = h.store.ReapDeadProcesses(context.Background(), engine.At(t0.Add(time.Hour)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		j := h.job(res.ID)
		require.NotEqual(t, engine.StateFailed, j.State, "a job that never ran is not failed as lost (last error %q)", j.LastError)
	})
}

// A drain whose claim's reply is lost while the connection stays down
// says so: the error names the claim's failure and the release's.
func TestADrainSaysWhenItCouldNotReleaseALostClaimsJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error { return nil }))
		s, db, client := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		db.failStmt = func(q string) bool { return strings.Contains(q, lockRunning) }
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.ErrorIs(t, err, errConnReset)
		require.ErrorContains(t, err, "were not released")
		require.Equal(t, engine.StateRunning, h.job(res.ID).State, "left to the reaper")
	})
}

type connRated struct{ N int }

func (connRated) Kind() string { return "conn_rated" }

// guarantees.md, "A claim whose outcome is unknown ... leaves no job
// behind", for a claim that decides rate limits (on PostgreSQL its writes
// and COMMIT go in one pipelined round trip, which this wrapper keeps, and
// lost_runs_test.go's does not): the claim's commit lands (its jobs
// running, the budget charged) and its reply is lost. The worker
// releases the jobs, and every one runs once, at the limit's pace.
func TestALostRateLimitedClaimRunsEveryJobOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connRated]) error {
			mu.Lock()
			runs[j.Args.N]++
			mu.Unlock()
			return nil
		}, jobs.RateLimit(ratelimit.Limit[connRated]{To: 2, Per: time.Second, Burst: 2, Key: "global"})))
		s, db, client := lossStore(h)
		var fired atomic.Bool
		db.loseReply = func(stmts []string) bool {
			return has(stmts, markRunning) && fired.CompareAndSwap(false, true)
		}
		for n := 1; n <= 4; n++ {
			_, err := client.Enqueue(context.Background(), connRated{N: n})
			require.NoError(t, err)
		}
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		stop := h.run(w)
		ran := func() int { mu.Lock(); defer mu.Unlock(); return len(runs) }
		waitFor(t, h, 100*time.Millisecond, func() bool { return ran() == 4 }, func() string {
			js, _ := h.store.ListJobs(context.Background(), engine.JobFilter{Limit: 10})
			var st []string
			for _, j := range js {
				st = append(st, fmt.Sprintf("%d:%s", j.ID, j.State))
			}
			return fmt.Sprintf("%d of 4 jobs ran; jobs %v", ran(), st)
		})
		stop()
		require.True(t, fired.Load(), "the claim's reply was lost")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1, 4: 1}, runs)
	})
}
