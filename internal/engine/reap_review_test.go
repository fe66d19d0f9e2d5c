package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A worker that dies": the reaper releases its running jobs
// "counting the lost run as an attempt (a job with none left fails with
// `process lost`)"; dashboard.md: the job page shows "every failed attempt
// with its error in full (... kept with the job in sluice_attempts)";
// Attempts: "A run that completed, or was given back (a release, an
// upstream 429), has none" — a lost run is neither.
//
// The reaper spends the lost run's attempt and sets its error, but keeps
// no attempt for it: a job that failed for good as "process lost" shows no
// failed attempt at all, and one that runs again has a gap where the lost
// run was.
func TestReviewALostRunIsKeptAsAFailedAttempt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		again, last := job("k", "default", 0), job("k", "default", 0)
		last.MaxAttempts = 1
		ids := enqueue(t, s, t0, again, last)
		require.Len(t, claim(t, s, pid, t0, 10).Jobs, 2)

		n, err := s.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, engine.StateReady, state(t, s, ids[0]).State)
		require.Equal(t, engine.StateFailed, state(t, s, ids[1]).State)
		for _, id := range ids {
			j := state(t, s, id)
			require.Equal(t, 1, j.Attempt, "the lost run is counted")
			require.Equal(t, engine.LostError, j.LastError)
			as, err := s.Attempts(ctx, id)
			require.NoError(t, err)
			require.Len(t, as, 1, "job %d (%s): the lost run is kept as its failed attempt", id, j.State)
			require.Equal(t, 1, as[0].Attempt)
			require.Equal(t, engine.LostError, as[0].Error)
		}
	})
}

// guarantees.md, "A worker that pauses": "the results of the runs it had in
// flight are ignored: a completion only counts for the process that holds
// the claim". Finish leaves the job alone (SetJobs is for the process's
// running jobs), but RecordAttempts is not: a failed run's result from a
// process presumed dead inserts an attempt for the job's run that another
// process now holds, under that run's number and with whatever error the
// job carries.
func TestReviewALostRunsFailureKeepsNoAttemptForAnotherProcesssRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		paused := register(t, s, t0)
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		require.Len(t, claim(t, s, paused, t0, 1).Jobs, 1)
		_, err := s.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		before, err := s.Attempts(ctx, id)
		require.NoError(t, err)

		// Another process runs the job again.
		live := register(t, s, at(10*time.Minute))
		require.Len(t, claim(t, s, live, at(10*time.Minute), 1).Jobs, 1)

		// The paused process comes back and writes its lost run's failure.
		require.NoError(t, s.Finish(ctx, paused, engine.At(at(11*time.Minute)), engine.Outcomes{Others: []engine.Transition{
			{ID: id, State: engine.StateScheduled, RunAt: at(12 * time.Minute), Error: "stale: the lost run failed"},
		}}))
		j := state(t, s, id)
		require.Equal(t, engine.StateRunning, j.State)
		require.Equal(t, live, j.ProcessID)
		require.Equal(t, 2, j.Attempt)
		after, err := s.Attempts(ctx, id)
		require.NoError(t, err)
		require.Equal(t, before, after, "the ignored result keeps no attempt (attempt 2 still runs, for process %d)", live)
	})
}

// Probe (passes): guarantees.md, "A worker that dies": "Any live worker or
// dispatcher that finds a heartbeat older than 5 minutes (DeadAfter)
// releases that process's running jobs back to ready, counting the lost
// run as an attempt"; scaling.md/operations.md: several processes run
// against one database. Two processes, on their own pools, reaping the
// same dead process at once release each of its jobs once and count one
// attempt each.
func TestReviewTwoReapersAtOnceReleaseEachLostJobOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		other := open()
		dead := register(t, s, t0)
		const n = 60
		news := make([]engine.NewJob, n)
		for i := range news {
			news[i] = job("k", "default", 0)
		}
		ids := enqueue(t, s, t0, news...)
		require.Len(t, claim(t, s, dead, t0, n).Jobs, n)

		start := make(chan struct{})
		counts := make(chan int, 2)
		errs := make(chan error, 2)
		for _, st := range []*engine.Store{s, other} {
			go func() {
				<-start
				released, err := st.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
				counts <- released
				errs <- err
			}()
		}
		close(start)
		total := 0
		for range 2 {
			total += <-counts
			require.NoError(t, <-errs)
		}
		// A reaper that skipped the other's locked rows may leave some for
		// the next round; none is released twice.
		more, err := s.ReapDeadProcesses(ctx, engine.At(at(11*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, n, total+more, "each lost job released once")
		for _, id := range ids {
			j := state(t, s, id)
			require.Equal(t, engine.StateReady, j.State)
			require.Equal(t, 1, j.Attempt, "job %d: one lost run, one attempt", id)
		}
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Empty(t, ps, "the dead process is removed")
	})
}
