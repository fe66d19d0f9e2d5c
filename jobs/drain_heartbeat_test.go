package jobs_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Delivery": "A claimed job runs at least once and, in the
// normal course, exactly once"; only "A worker that dies ... stops
// heartbeating" and is presumed dead. Drain (jobs/drain.go: "the same
// claims, limits and outcomes as Run", for tests and scripts) registered a
// process but never heartbeat: a drain that lasted longer than DeadAfter
// while any worker or dispatcher ran was presumed dead. Its claimed batch
// was released and ran again (here, in the drain itself), and the results
// of the first runs were ignored. It heartbeats now, before each job too,
// so that its handlers' time counts on a fake clock as on the system's.
func TestADrainLongerThanDeadAfterIsNotPresumedDead(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var mu sync.Mutex
		runs := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			mu.Lock()
			runs[j.Args.N]++
			first := runs[j.Args.N] == 1
			mu.Unlock()
			if !first {
				return nil
			}
			h.clock.Advance(40 * time.Second) // each job takes 40 s
			if j.Args.N == 10 {
				// 6m40s into the drain, a dispatcher's (or a worker's)
				// heartbeat looks for dead processes.
				_, err := h.store.ReapDeadProcesses(ctx, engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
				assertNoErr(t, err)
			}
			return nil
		}))
		for i := 1; i <= 10; i++ {
			h.enqueue(noop{N: i})
		}
		res := h.drain(jobs.WorkerConfig{JobTimeout: -1})
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i <= 10; i++ {
			require.Equal(t, 1, runs[i], "job %d ran %d times (%d runs completed in all)", i, runs[i], res.Completed)
		}
	})
}

// One job of a drain that runs longer than DeadAfter keeps the drain alive
// too: its heartbeat goes on beside the handler, as Run's does.
func TestADrainsJobLongerThanDeadAfterIsNotPresumedDead(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error {
			runs++
			if runs > 1 {
				return nil
			}
			// Seven minutes, one at a time: each minute the drain's
			// heartbeat beats, then waits for the next.
			for i := 1; i <= 7; i++ {
				if !waitTimer(t, h, t0.Add(time.Duration(i)*time.Minute)) {
					return nil
				}
				h.clock.Advance(time.Minute)
			}
			if !waitTimer(t, h, t0.Add(8*time.Minute)) { // the last beat is over
				return nil
			}
			n, err := h.store.ReapDeadProcesses(ctx, engine.HostTime(h.clock.Now), jobs.DefaultDeadAfter)
			assertNoErr(t, err)
			if n != 0 {
				t.Errorf("the drain was presumed dead: %d jobs released", n)
			}
			return nil
		}))
		id := h.enqueue(noop{})
		res := h.drain(jobs.WorkerConfig{JobTimeout: -1})
		require.Equal(t, 1, runs, "the job ran once")
		require.Equal(t, 1, res.Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
	})
}

// waitTimer waits for a timer of h's clock at at, reporting (as an error
// of t) when none comes.
func waitTimer(t *testing.T, h *harness, at time.Time) bool {
	select {
	case <-h.clock.WaitForTimerAt(at):
		return true
	case <-time.After(30 * time.Second):
		t.Errorf("no timer at %s: the drain does not heartbeat", at.Sub(t0))
		return false
	}
}

// A drain writes each job's result as the job ends, as Run's recorder
// does: it wrote them only once its whole claim (Concurrency jobs) had
// run, so a job that had run stayed running meanwhile, to run again if the
// drain was presumed dead.
func TestADrainWritesEachResultAsItsJobEnds(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var first int64
		var seen engine.State
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			if j.Args.N == 2 {
				seen = h.job(first).State
			}
			return nil
		}))
		first = h.enqueue(noop{N: 1})
		h.enqueue(noop{N: 2})
		require.Equal(t, 2, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateCompleted, seen, "the first job's result is written before the second runs")
	})
}

// A drain that learns from its heartbeat that it was presumed dead (it
// stalled past DeadAfter, and another process released its jobs) runs no
// more of the claim it made before: those jobs went back to ready, and may
// be running elsewhere already. It claims them again, as the process it
// registered anew. Each runs once; only the job it was running when
// presumed dead runs again (at least once).
func TestADrainPresumedDeadRunsNoMoreOfItsLostClaim(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		st := &stall{t: t, h: h}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			st.run(j.Args.N)
			return nil
		}))
		var ids []int64
		for i := 1; i <= 3; i++ {
			ids = append(ids, h.enqueue(noop{N: i}))
		}
		res := h.drain(jobs.WorkerConfig{JobTimeout: -1})
		require.Equal(t, map[int]int{1: 2, 2: 1, 3: 1}, st.counts(), "the claim's jobs not run yet run once, after the drain registered again")
		require.Equal(t, 4, res.Completed, "Drain counts runs: the lost one completed too")
		for _, id := range ids {
			require.Equal(t, engine.StateCompleted, h.job(id).State)
		}
	})
}

// insertProcess marks RegisterProcess's statement.
const insertProcess = "INSERT INTO sluice_processes"

// guarantees.md, "Graceful shutdown": a drain "that learns it was
// [presumed dead] anyway (it stalled) runs no more of the claim it had
// made: those jobs went back to ready, and it claims them again."
//
// The drain stalls; another process presumes it dead and releases its
// claim of three jobs. The drain's heartbeat learns it was reaped and
// registers again, but that registration fails: its reply is lost (its
// row is written), or it fails outright. The drain's process id is the
// old one still, yet it knows it was reaped: it runs none of the rest of
// its lost claim, and claims those jobs again. Jobs 2 and 3 run once; only
// job 1, running when the drain was presumed dead, runs again.
func TestADrainWhoseRegistrationAgainFailsRunsNoMoreOfItsLostClaim(t *testing.T) {
	for _, lost := range []bool{true, false} {
		name := "failed"
		if lost {
			name = "reply lost"
		}
		t.Run(name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				st := &stall{t: t, h: h}
				require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
					st.run(j.Args.N)
					return nil
				}))
				s, db, client := lossStore(h)
				inserts := 0 // under db.mu
				if lost {
					db.loseReply = func(stmts []string) bool {
						if has(stmts, insertProcess) {
							inserts++
							return inserts == 2 // the registration again
						}
						return false
					}
				} else {
					db.failStmt = func(q string) bool {
						if strings.Contains(q, insertProcess) {
							inserts++
							return inserts == 2
						}
						return false
					}
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
				require.Equal(t, map[int]int{1: 2, 2: 1, 3: 1}, st.counts(),
					"the jobs of the lost claim not run yet run once: the drain learned it was presumed dead, though it could not register again")
			})
		})
	}
}

// stall is the handlers' part in a drain that stalls on the first job of
// its claim of three: the first run of job 1 has another process, an hour
// on, presume the drain dead and release its claim, and then moves the
// clock a minute on, when the drain's heartbeat is due and tells it. It
// counts each job's runs.
type stall struct {
	t    *testing.T
	h    *harness
	mu   sync.Mutex
	runs map[int]int
}

// run is a run of job n.
func (s *stall) run(n int) {
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[int]int{}
	}
	s.runs[n]++
	first := s.runs[n] == 1
	s.mu.Unlock()
	if n != 1 || !first {
		return
	}
	released, err := s.h.store.ReapDeadProcesses(context.Background(), engine.At(s.h.clock.Now().Add(time.Hour)), jobs.DefaultDeadAfter)
	assertNoErr(s.t, err)
	if released != 3 {
		s.t.Errorf("the reap released %d jobs, not the claim's 3", released)
	}
	s.h.clock.Advance(time.Minute)
}

// counts returns each job's runs.
func (s *stall) counts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.runs)
}
