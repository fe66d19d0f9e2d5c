package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

func TestEnqueueReturnsIDsInOrderAndKeepsArgs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		jobs := make([]engine.NewJob, 7)
		for i := range jobs {
			jobs[i] = job("email", "default", 0)
			jobs[i].Args = []byte(fmt.Sprintf(`{"n":%d}`, i))
		}
		got := enqueue(t, s, t0, jobs...)
		for i := 1; i < len(got); i++ {
			require.Greater(t, got[i], got[i-1])
		}
		for i, id := range got {
			j := state(t, s, id)
			require.Equal(t, engine.StateReady, j.State)
			require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(j.Args))
			require.Equal(t, t0, j.CreatedAt)
		}
	})
}

func TestEnqueueManyIsAllOrNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		bad := job("email", "", 0)
		_, err := s.Enqueue(context.Background(), nil, engine.At(t0), []engine.NewJob{job("email", "default", 0), bad})
		require.ErrorContains(t, err, "job 1")
		require.ErrorContains(t, err, "queue is empty")
		stats, err := s.Stats(context.Background())
		require.NoError(t, err)
		require.Empty(t, stats, "nothing was written")
	})
}

func TestEnqueueInsideATransaction(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		tx, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		rolled, err := s.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{job("email", "default", 0)})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		_, err = s.GetJob(ctx, rolled[0].ID)
		require.ErrorIs(t, err, engine.ErrNotFound)

		tx, err = s.DB().Begin(ctx)
		require.NoError(t, err)
		kept, err := s.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{job("email", "default", 0)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, engine.StateReady, state(t, s, kept[0].ID).State)
	})
}

func TestClaimByPriorityThenIDAcrossQueuesInOrder(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		low := enqueue(t, s, t0, job("a", "default", 5))[0]
		high1 := enqueue(t, s, t0, job("a", "default", -1))[0]
		high2 := enqueue(t, s, t0, job("a", "default", -1))[0]
		mail := enqueue(t, s, t0, job("a", "mail", -10))[0]
		pid := register(t, s, t0)

		res := claim(t, s, pid, at(time.Second), 2, "default", "mail")
		require.Equal(t, []int64{high1, high2}, ids(res.Jobs))
		for _, j := range res.Jobs {
			require.Equal(t, 1, j.Attempt)
		}
		res = claim(t, s, pid, at(time.Second), 5, "default", "mail")
		require.Equal(t, []int64{low, mail}, ids(res.Jobs), "the first queue is drained before the next")
		require.Empty(t, claim(t, s, pid, at(time.Second), 5, "default", "mail").Jobs)

		j := state(t, s, high1)
		require.Equal(t, engine.StateRunning, j.State)
		require.Equal(t, pid, j.ProcessID)
		require.Equal(t, at(time.Second), j.AttemptedAt)
	})
}

func TestConcurrentClaimsNeverShareAJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		const n = 300
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = job("a", "default", i%3)
		}
		enqueue(t, s, t0, jobs...)
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			pid := register(t, s, t0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := s.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 7, Clock: engine.At(t0)})
					if !assertNoErr(t, err) || len(res.Jobs) == 0 {
						return
					}
					mu.Lock()
					for _, j := range res.Jobs {
						seen[j.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Len(t, seen, n)
		for id, c := range seen {
			require.Equal(t, 1, c, "job %d claimed %d times", id, c)
		}
	})
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestScheduledJobsWaitForPromotion(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		j := job("a", "default", 0)
		j.RunAt = at(time.Minute)
		id := enqueue(t, s, t0, j)[0]
		require.Equal(t, engine.StateScheduled, state(t, s, id).State)
		pid := register(t, s, t0)
		require.Empty(t, claim(t, s, pid, at(2*time.Minute), 5).Jobs, "a scheduled job is not claimed before promotion")

		n, _, err := s.Promote(ctx, engine.At(at(59*time.Second)), 100)
		require.NoError(t, err)
		require.Zero(t, n, "not due yet")
		n, queues, err := s.Promote(ctx, engine.At(at(time.Minute)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []string{"default"}, queues)
		require.Equal(t, []int64{id}, ids(claim(t, s, pid, at(time.Minute), 5).Jobs))
	})
}

func TestConcurrentPromotersPromoteEachJobOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		const n = 200
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = job("a", "default", 0)
			jobs[i].RunAt = at(time.Duration(i) * time.Millisecond)
		}
		enqueue(t, s, t0.Add(-time.Hour), jobs...)
		var mu sync.Mutex
		total := 0
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, _, err := s.Promote(context.Background(), engine.At(at(time.Hour)), 25)
					if !assertNoErr(t, err) || got == 0 {
						return
					}
					mu.Lock()
					total += got
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Equal(t, n, total)
	})
}

func TestFinishOutcomes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		done, retry, fail, cancel, snooze := 0, 1, 2, 3, 4
		got := enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0), job("a", "default", 0), job("a", "default", 0), job("a", "default", 0))
		pid := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 10).Jobs, 5)
		err := s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runs(t, s, got[done]), Others: ran(t, s,
			engine.Transition{ID: got[retry], State: engine.StateScheduled, RunAt: at(time.Minute), Error: "boom"},
			engine.Transition{ID: got[fail], State: engine.StateFailed, Error: "fatal", Finished: true},
			engine.Transition{ID: got[cancel], State: engine.StateCancelled, Error: "discarded", Finished: true},
			engine.Transition{ID: got[snooze], State: engine.StateScheduled, RunAt: at(time.Hour), AttemptDelta: -1},
		)})

		require.NoError(t, err)

		j := state(t, s, got[done])
		require.Equal(t, engine.StateCompleted, j.State)
		require.Equal(t, at(time.Second), j.FinishedAt)
		j = state(t, s, got[retry])
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, at(time.Minute), j.RunAt)
		require.Equal(t, "boom", j.LastError)
		require.Equal(t, 1, j.Attempt)
		require.True(t, j.FinishedAt.IsZero())
		j = state(t, s, got[fail])
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, "fatal", j.LastError)
		require.Equal(t, at(time.Second), j.FinishedAt)
		require.Equal(t, engine.StateCancelled, state(t, s, got[cancel]).State)
		j = state(t, s, got[snooze])
		require.Equal(t, 0, j.Attempt, "a snooze gives back its attempt")
		require.Equal(t, at(time.Hour), j.RunAt)
	})
}

func TestFinishIgnoresJobsNoLongerOwned(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		other := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 1).Jobs, 1)
		require.NoError(t, s.Finish(context.Background(), other, engine.At(t0), engine.Outcomes{Completed: runs(t, s, id)}))
		require.Equal(t, engine.StateRunning, state(t, s, id).State, "another process cannot complete it")
	})
}

func TestDeleteOnComplete(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		s.DeleteOnComplete = true
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 1)
		require.NoError(t, s.Finish(context.Background(), pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, id)}))
		_, err := s.GetJob(context.Background(), id)
		require.ErrorIs(t, err, engine.ErrNotFound)
	})
}

func TestPausedQueueIsNotClaimed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		require.NoError(t, s.PauseQueue(ctx, "default", t0))
		require.NoError(t, s.PauseQueue(ctx, "default", t0), "pausing twice is harmless")
		require.Empty(t, claim(t, s, pid, t0, 5).Jobs)
		require.Equal(t, engine.StateReady, state(t, s, id).State, "its jobs stay")
		qs, err := s.ListQueues(ctx)
		require.NoError(t, err)
		require.Equal(t, []engine.QueueInfo{{Name: "default", Paused: true}}, qs)
		require.NoError(t, s.ResumeQueue(ctx, "default", t0))
		require.Equal(t, []int64{id}, ids(claim(t, s, pid, t0, 5).Jobs))
	})
}

func TestReleaseGivesTheAttemptBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 1)
		require.NoError(t, s.Release(context.Background(), pid, engine.At(at(time.Second)), runs(t, s, id)))
		j := state(t, s, id)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, []int64{id}, ids(claim(t, s, pid, at(time.Second), 1).Jobs))
	})
}

// A claim whose commit landed while its caller saw an error leaves jobs
// running for a live process that never runs them: ReleaseStrays gives
// those back, and only those — not the jobs the process runs or has
// results for (known), nor another process's.
func TestReleaseStraysReleasesOnlyTheProcessesUnknownJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0), job("a", "default", 0), job("a", "default", 0))
		pid, other := register(t, s, t0), register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 3).Jobs, 3)
		require.Len(t, claim(t, s, other, t0, 1).Jobs, 1)
		strays, err := s.ReleaseStrays(ctx, pid, engine.At(at(time.Second)), []int64{got[0], got[2]}, 1)
		require.NoError(t, err)
		require.Equal(t, []int64{got[1]}, strays)
		for i, want := range []engine.State{engine.StateRunning, engine.StateReady, engine.StateRunning, engine.StateRunning} {
			require.Equal(t, want, state(t, s, got[i]).State, "job %d", i)
		}
		require.Equal(t, 0, state(t, s, got[1]).Attempt, "the attempt its claim counted is given back")
		strays, err = s.ReleaseStrays(ctx, pid, engine.At(at(time.Second)), []int64{got[0], got[2]}, 1)
		require.NoError(t, err)
		require.Empty(t, strays)
	})
}

func TestDeadProcessJobsAreReleased(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		a := job("a", "default", 0)
		last := job("a", "default", 0)
		last.MaxAttempts = 1
		got := enqueue(t, s, t0, a, last)
		dead := register(t, s, t0)
		live := register(t, s, t0)
		require.Len(t, claim(t, s, dead, t0, 2).Jobs, 2)

		_, err := s.Heartbeat(ctx, live, engine.At(at(4*time.Minute)))
		require.NoError(t, err)
		n, err := s.ReapDeadProcesses(ctx, engine.At(at(4*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Zero(t, n, "a heartbeat 4 minutes old is alive")

		_, err = s.Heartbeat(ctx, live, engine.At(at(6*time.Minute)))
		require.NoError(t, err)
		n, err = s.ReapDeadProcesses(ctx, engine.At(at(6*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		j := state(t, s, got[0])
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 1, j.Attempt, "the lost run counts as an attempt")
		require.Equal(t, engine.LostError, j.LastError)
		require.Equal(t, engine.StateFailed, state(t, s, got[1]).State, "no attempts left")

		ok, err := s.Heartbeat(ctx, dead, engine.At(at(6*time.Minute)))
		require.NoError(t, err)
		require.False(t, ok, "the reaped process learns it must register again")
		procs, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, procs, 1)
		require.Equal(t, live, procs[0].ID)
	})
}

// guarantees.md, "A worker that pauses": a process presumed dead that comes
// back may claim before its next heartbeat tells it it was reaped. Those
// jobs are its own to run: another process's reaper used to release them at
// once (running for a process whose row is gone), so they ran twice. They
// are released only once they have been running DeadAfter without a
// registered process, as a dead process's jobs are.
func TestJobsClaimedByAReapedProcessBeforeItLearnsRunOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0))
		paused, live := register(t, s, t0), register(t, s, t0)
		reap := func(now time.Time) int {
			_, err := s.Heartbeat(ctx, live, engine.At(now))
			require.NoError(t, err)
			n, err := s.ReapDeadProcesses(ctx, engine.At(now), 5*time.Minute)
			require.NoError(t, err)
			return n
		}
		require.Zero(t, reap(at(6*time.Minute)), "the paused process ran nothing")

		// It comes back and claims both jobs before its heartbeat.
		require.Len(t, claim(t, s, paused, at(6*time.Minute), 2).Jobs, 2)
		require.Zero(t, reap(at(6*time.Minute+time.Second)), "jobs its process runs are not lost")
		require.Equal(t, engine.StateRunning, state(t, s, got[0]).State)
		require.NoError(t, s.Finish(ctx, paused, engine.At(at(7*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[0])}))
		require.Equal(t, engine.StateCompleted, state(t, s, got[0]).State, "its result counts: the claim is its own")

		// The other job's run never returns: once it has been running
		// DeadAfter with no process registered, it is lost.
		require.Zero(t, reap(at(11*time.Minute)))
		require.Equal(t, 1, reap(at(11*time.Minute+time.Second)))
		j := state(t, s, got[1])
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, engine.LostError, j.LastError)
	})
}

func TestPendingMigrations(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.OpenRaw(t)
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("a", "default", 0)})
			require.ErrorIs(t, err, engine.ErrPendingMigrations)
			require.ErrorIs(t, s.CheckSchema(ctx), engine.ErrPendingMigrations)

			applied, err := s.MigrateUp(ctx, 1)
			require.NoError(t, err)
			require.Len(t, applied, 1)
			require.ErrorIs(t, s.CheckSchema(ctx), engine.ErrPendingMigrations, "an older schema is pending too")
			_, err = s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("a", "default", 0)})
			require.ErrorIs(t, err, engine.ErrPendingMigrations)

			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			require.NoError(t, s.CheckSchema(ctx))
			again, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			require.Empty(t, again, "migrating twice applies nothing")
			enqueue(t, s, t0, job("a", "default", 0))

			all, err := s.Migrations()
			require.NoError(t, err)
			reverted, err := s.MigrateDown(ctx, len(all))
			require.NoError(t, err)
			require.Len(t, reverted, len(all))
			st, err := s.MigrationStatus(ctx)
			require.NoError(t, err)
			for _, m := range st {
				require.False(t, m.Applied)
			}
			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err, "down then up again works")
		})
	}
}

func TestRetryAndCancelByOperator(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0))
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 2)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s, engine.Transition{ID: got[0], State: engine.StateFailed, Error: "x", Finished: true})}))

		_, err := s.RetryJobs(ctx, engine.At(at(time.Second)), []int64{got[1]})
		require.ErrorContains(t, err, "it is running")
		require.ErrorIs(t, err, engine.ErrNotAllowed)
		moved, err := s.RetryJobs(ctx, engine.At(at(time.Second)), []int64{got[0]})
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: got[0], State: engine.StateReady}}, moved)
		j := state(t, s, got[0])
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 0, j.Attempt)

		moved, err = s.CancelJobs(ctx, engine.At(at(time.Second)), []int64{got[0]}, "")
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: got[0], State: engine.StateCancelled}}, moved)
		require.Equal(t, engine.StateCancelled, state(t, s, got[0]).State)
		_, err = s.CancelJobs(ctx, engine.At(at(time.Second)), []int64{999999}, "")
		require.True(t, errors.Is(err, engine.ErrNotFound))
	})
}

func TestDeleteFinishedKeepsFailedAndRecent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0), job("a", "default", 0))
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 3)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, got[0]), Others: ran(t, s, engine.Transition{ID: got[1], State: engine.StateFailed, Finished: true})}))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(2*time.Hour)), engine.Outcomes{Completed: runs(t, s, got[2])}))
		n, err := s.DeleteFinished(ctx, at(time.Hour), 1)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = s.GetJob(ctx, got[0])
		require.ErrorIs(t, err, engine.ErrNotFound)
		state(t, s, got[1])
		state(t, s, got[2])
	})
}

func TestStatsCountsByQueueAndState(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		later := job("a", "mail", 0)
		later.RunAt = at(time.Hour)
		enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0), later)
		st, err := s.Stats(context.Background())
		require.NoError(t, err)
		require.Equal(t, []engine.QueueStats{
			{Queue: "default", Counts: map[engine.State]int64{engine.StateReady: 2}},
			{Queue: "mail", Counts: map[engine.State]int64{engine.StateScheduled: 1}},
		}, st)
	})
}
