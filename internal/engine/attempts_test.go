package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Every failed run keeps its error with the job, in order; a run given
// back (an upstream 429) is not a failed attempt; the errors go with the
// job, whether it is deleted as it completes or by the cleaner.
func TestEveryFailedAttemptKeepsItsError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		long := strings.Repeat("é", 8000) + " 🙂"
		enq := enqueue(t, s, t0, job("k", "default", 0), job("k", "default", 0))
		a, b := enq[0], enq[1]
		run := func(now time.Time, want ...int64) {
			t.Helper()
			res := claim(t, s, pid, now, 10)
			require.ElementsMatch(t, want, ids(res.Jobs))
		}
		retry := func(now time.Time, id int64, err string, delta int) engine.Transition {
			return engine.Transition{ID: id, State: engine.StateScheduled, RunAt: now.Add(time.Second), Error: err, AttemptDelta: delta}
		}
		run(t0, a, b)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			retry(t0, a, "first: connection reset", 0), retry(t0, b, long, 0))}))
		promote(t, s, t0.Add(time.Second))
		run(t0.Add(time.Second), a, b)
		// a is turned away by its upstream (429: no attempt spent); b fails again.
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(time.Second)), engine.Outcomes{Others: ran(t, s,
			retry(t0.Add(time.Second), a, "upstream said wait", -1), retry(t0.Add(time.Second), b, "second: timeout", 0))}))

		as, err := s.Attempts(ctx, a)
		require.NoError(t, err)
		require.Len(t, as, 1, "the 429 is not a failed attempt")
		require.Equal(t, 1, as[0].Attempt)
		require.Equal(t, "first: connection reset", as[0].Error)
		require.Equal(t, t0, as[0].FailedAt)
		bs, err := s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Len(t, bs, 2)
		require.Equal(t, 1, bs[0].Attempt)
		require.Equal(t, long, bs[0].Error, "a long error with multi-byte characters, whole")
		require.Equal(t, 2, bs[1].Attempt)
		require.Equal(t, "second: timeout", bs[1].Error)

		// a completes and is deleted at once, its kept error with it; b
		// completes, is kept, and goes with the cleaner.
		promote(t, s, t0.Add(2*time.Second))
		run(t0.Add(2*time.Second), a, b)
		s.DeleteOnComplete = true
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Second)), engine.Outcomes{Completed: runs(t, s, a), WithAttempts: runs(t, s, a)}))
		as, err = s.Attempts(ctx, a)
		require.NoError(t, err)
		require.Empty(t, as)
		s.DeleteOnComplete = false
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Second)), engine.Outcomes{Completed: runs(t, s, b)}))
		bs, err = s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Len(t, bs, 2, "kept while the job is kept")
		n, err := s.DeleteFinished(ctx, t0.Add(time.Hour), 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		bs, err = s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Empty(t, bs)
	})
}

func promote(t *testing.T, s *engine.Store, now time.Time) {
	t.Helper()
	_, _, err := s.Promote(context.Background(), engine.At(now), 100)
	require.NoError(t, err)
}

// guarantees.md, "A worker that dies": the reaper releases its running jobs
// "counting the lost run as an attempt (a job with none left fails with
// `process lost`)"; dashboard.md: the job page shows "every failed attempt
// with its error in full (... kept with the job in sluice_attempts)";
// Attempts: "A run that completed, or was given back (a release, an
// upstream 429), has none" — a lost run is neither.
//
// The reaper spends the lost run's attempt, sets its error, and keeps it
// as a failed attempt. It once kept none: a job that failed for good as
// "process lost" showed no failed attempt at all, and one that ran again
// had a gap where the lost run was.
func TestALostRunIsKeptAsAFailedAttempt(t *testing.T) {
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
// running jobs), and keeps no attempt for it. RecordAttempts once did: a
// failed run's result from a process presumed dead inserted an attempt
// for the job's run that another process now holds, under that run's
// number and with whatever error the job carried.
func TestALostRunsFailureKeepsNoAttemptForAnotherProcesssRun(t *testing.T) {
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
			{ID: id, Claim: 1, State: engine.StateScheduled, RunAt: at(12 * time.Minute), Error: "stale: the lost run failed"},
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
