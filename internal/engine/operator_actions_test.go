package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Operators' actions (retry, cancel, pause) on jobs in every
// state, while workers run them.

// heldMatchesHolders checks a key's semaphore counts exactly its holders
// and never more than its limit.
func heldMatchesHolders(t *testing.T, s *engine.Store, key string) engine.SemaphoreInfo {
	t.Helper()
	sem := semaphore(t, s, key)
	require.Equal(t, sem.Holding, sem.Held, "semaphore %s: held counts its holders", key)
	require.LessOrEqual(t, sem.Held, sem.Limit, "semaphore %s: never over its limit", key)
	return sem
}

// Retrying or cancelling a running job is refused with an error that
// names the job and its state, and changes nothing: the worker's result
// still lands.
func TestOperatorRunningJobIsRefusedAndItsResultLands(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("run/a", 1), slotted("run/a", 1))
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5)
		require.Equal(t, got[:1], ids(res.Jobs))
		for _, op := range []func() ([]engine.Moved, error){
			func() ([]engine.Moved, error) { return s.RetryJobs(ctx, engine.At(t0), got[:1]) },
			func() ([]engine.Moved, error) { return s.CancelJobs(ctx, engine.At(t0), got[:1], "") },
		} {
			done, err := op()
			require.Error(t, err)
			require.Empty(t, done)
			require.ErrorContains(t, err, fmt.Sprintf("job %d", got[0]))
			require.ErrorContains(t, err, "running")
			require.ErrorIs(t, err, engine.ErrNotAllowed)
		}
		j := state(t, s, got[0])
		require.Equal(t, engine.StateRunning, j.State)
		require.True(t, j.HoldsSlot)
		heldMatchesHolders(t, s, "run/a")
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
		require.Equal(t, engine.StateCompleted, state(t, s, got[0]).State)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "the slot went on to the blocked job")
		heldMatchesHolders(t, s, "run/a")
		for _, op := range []func() ([]engine.Moved, error){
			func() ([]engine.Moved, error) { return s.RetryJobs(ctx, engine.At(t0), got[:1]) },
			func() ([]engine.Moved, error) { return s.CancelJobs(ctx, engine.At(t0), got[:1], "") },
		} {
			_, err := op()
			require.ErrorContains(t, err, "completed")
		}
	})
}

// An id that names no job — zero, negative, the largest — is refused with
// ErrNotFound naming it, and nothing else is touched.
func TestOperatorUnknownIDsAreNamed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, job("a", "default", 0))
		for _, id := range []int64{0, -1, math.MinInt64, math.MaxInt64, got[0] + 1000} {
			for verb, op := range map[string]func() ([]engine.Moved, error){
				"retry":  func() ([]engine.Moved, error) { return s.RetryJobs(ctx, engine.At(t0), []int64{id}) },
				"cancel": func() ([]engine.Moved, error) { return s.CancelJobs(ctx, engine.At(t0), []int64{id}, "") },
			} {
				done, err := op()
				require.True(t, errors.Is(err, engine.ErrNotFound), "%s %d: %v", verb, id, err)
				require.ErrorContains(t, err, fmt.Sprintf("job %d", id))
				require.Empty(t, done)
			}
		}
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
	})
}

// Retrying and cancelling jobs a rate limit deferred (scheduled with a
// slot) or parked never lets the budget admit more than its limit, and
// every job not cancelled still runs.
func TestOperatorRetryAndCancelOfDeferredAndParkedJobsKeepTheBound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		const horizon = 5 * time.Minute
		jobs := make([]engine.NewJob, 12)
		for i := range jobs {
			jobs[i] = limited("k", "k/x")
		}
		got := enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 20, lim, horizon)
		require.Len(t, res.Jobs, 1)
		admitted := []time.Time{t0}
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		var sched, parked []int64
		for _, d := range res.Deferred {
			if d.Parked {
				parked = append(parked, d.JobID)
			} else {
				sched = append(sched, d.JobID)
			}
		}
		require.Len(t, sched, 5)
		require.NotEmpty(t, parked)
		now := at(time.Second)
		// Retry one scheduled and one parked job: ready now.
		_, err := s.RetryJobs(ctx, engine.At(now), []int64{sched[2], parked[0]})
		require.NoError(t, err)
		// Cancel the first scheduled one and another parked one.
		_, err = s.CancelJobs(ctx, engine.At(now), []int64{sched[0], parked[1]}, "")
		require.NoError(t, err)
		cancelled := map[int64]bool{sched[0]: true, parked[1]: true}
		done := map[int64]bool{got[0]: true}
		for step := 1; step <= 200 && len(done)+len(cancelled) < len(got); step++ {
			now = at(time.Duration(step) * 15 * time.Second)
			_, err := s.Unpark(ctx, engine.At(now), horizon, 100, 0)
			require.NoError(t, err)
			_, _, err = s.Promote(ctx, engine.At(now), 100)
			require.NoError(t, err)
			r, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Clock: engine.At(now), Limits: lim, Horizon: horizon, PromoteDue: true})
			require.NoError(t, err)
			for _, j := range r.Jobs {
				require.False(t, cancelled[j.ID], "a cancelled job ran")
				require.False(t, done[j.ID], "job %d ran twice", j.ID)
				done[j.ID] = true
				admitted = append(admitted, now)
			}
			if len(r.Jobs) > 0 {
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runsOf(r.Jobs)}))
			}
		}
		require.Equal(t, len(got), len(done)+len(cancelled), "every job not cancelled ran")
		for i := 1; i < len(admitted); i++ {
			require.GreaterOrEqual(t, admitted[i].Sub(admitted[i-1]), time.Minute, "admissions %d and %d closer than the limit allows: %v", i-1, i, admitted)
		}
	})
}

// Two operators acting on one job at once — retry and retry, retry and
// cancel — leave it in a state the docs allow, and its key's semaphore
// counting exactly its holders, never more than To.
func TestOperatorConcurrentOperatorsKeepSlotsExact(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		other := open()
		pid := register(t, s, t0)
		for round := range 6 {
			key := fmt.Sprintf("race/%d", round)
			got := enqueue(t, s, t0, slotted(key, 1), slotted(key, 1))
			// Both run and fail for good: the key is free.
			for _, id := range got {
				res := claim(t, s, pid, t0, 1)
				require.Equal(t, []int64{id}, ids(res.Jobs))
				require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{
					Others:      []engine.Transition{{ID: id, State: engine.StateFailed, Error: "x", Finished: true, Claim: res.Jobs[0].Claims}},
					SlotHolders: runsOf(res.Jobs)}))
			}
			require.Zero(t, semaphore(t, s, key).Held)
			a, b := got[0], got[0]
			var opB func(*engine.Store) error
			switch round % 3 {
			case 0: // two retries of one job
				opB = func(st *engine.Store) error { _, err := st.RetryJobs(ctx, engine.At(t0), []int64{b}); return err }
			case 1: // retry and cancel of one job
				opB = func(st *engine.Store) error { _, err := st.CancelJobs(ctx, engine.At(t0), []int64{b}, ""); return err }
			case 2: // retries of the two jobs of the key
				b = got[1]
				opB = func(st *engine.Store) error { _, err := st.RetryJobs(ctx, engine.At(t0), []int64{b}); return err }
			}
			errs := make(chan error, 2)
			go func() { _, err := s.RetryJobs(ctx, engine.At(t0), []int64{a}); errs <- err }()
			go func() { errs <- opB(other) }()
			for range 2 {
				if err := <-errs; err != nil {
					require.ErrorContains(t, err, "only ", "refused for its state, if anything")
				}
			}
			sem := heldMatchesHolders(t, s, key)
			states := map[engine.State]int{}
			for _, id := range got {
				j := state(t, s, id)
				states[j.State]++
				require.Equal(t, j.State == engine.StateReady, j.HoldsSlot, "job %d is %s, holds_slot %v", id, j.State, j.HoldsSlot)
			}
			switch round % 3 {
			case 0:
				require.Equal(t, 1, states[engine.StateReady])
				require.Equal(t, 1, sem.Held)
			case 1:
				require.Equal(t, 1, states[engine.StateReady]+states[engine.StateCancelled])
			case 2:
				require.Equal(t, 1, states[engine.StateReady])
				require.Equal(t, 1, states[engine.StateBlocked])
			}
			// Drain the key so the next round's claims find nothing of it.
			for _, id := range got {
				if j := state(t, s, id); j.State == engine.StateReady || j.State == engine.StateBlocked {
					_, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, "")
					require.NoError(t, err)
				}
			}
			require.Zero(t, heldMatchesHolders(t, s, key).Held)
		}
	})
}

// Cancelling a pending coalescing job frees its key in every waiting
// state — ready, blocked on a slot, parked on a budget — so the next call
// makes a new job instead of joining (or being swallowed by) the
// cancelled one.
func TestOperatorCancellingAPendingCoalescedJobFreesItsKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		call := func(key string, mod func(*engine.NewJob)) engine.Enqueued {
			j := coalescing(key)
			if mod != nil {
				mod(&j)
			}
			res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{j})
			require.NoError(t, err)
			return res[0]
		}
		check := func(name string, first engine.Enqueued, want engine.State, key string, mod func(*engine.NewJob)) {
			t.Helper()
			require.Equal(t, want, state(t, s, first.ID).State, name)
			joined := call(key, mod)
			require.True(t, joined.Joined, "%s: a call joins the pending job", name)
			require.Equal(t, first.ID, joined.ID)
			_, err := s.CancelJobs(ctx, engine.At(t0), []int64{first.ID}, "")
			require.NoError(t, err, name)
			again := call(key, mod)
			require.False(t, again.Joined, "%s: after the cancel, a call makes a new job", name)
			require.NotEqual(t, first.ID, again.ID)
			require.Equal(t, engine.StateCancelled, state(t, s, first.ID).State)
		}
		// Ready.
		check("ready", call("co/ready", nil), engine.StateReady, "co/ready", nil)
		// Blocked: its concurrency key is held by another job.
		conc := func(j *engine.NewJob) { j.Conc = &engine.Conc{Key: "co/slot", To: 1, Duration: time.Minute} }
		enqueue(t, s, t0, slotted("co/slot", 1))
		check("blocked", call("co/blocked", conc), engine.StateBlocked, "co/blocked", conc)
		// Parked: a rate limit with no room within the horizon.
		rated := func(j *engine.NewJob) { j.RateKeys = []engine.RateKey{{Key: "k/x", Cost: 1}} }
		enqueue(t, s, t0, limited("k", "k/x"))
		res := claimLimited(t, s, pid, t0, 10, lim, time.Minute, "default")
		require.NotEmpty(t, res.Jobs)
		p := call("co/parked", rated)
		claimLimited(t, s, pid, t0, 10, lim, time.Minute, "default")
		check("parked", p, engine.StateParked, "co/parked", rated)
		heldMatchesHolders(t, s, "co/slot")
	})
}

// A retried job of a paused queue becomes ready but is not claimed until
// the queue is resumed; a slot its cancel gives back goes to a blocked
// job of another queue, which runs.
func TestOperatorActionsOnAPausedQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		paused := slotted("pq/a", 1)
		paused.Queue = "held"
		other := slotted("pq/a", 1)
		other.Queue = "open"
		got := enqueue(t, s, t0, job("k", "held", 0), paused, other)
		res := claim(t, s, pid, t0, 1, "held")
		require.Equal(t, got[:1], ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: []engine.Transition{{ID: got[0], State: engine.StateFailed, Error: "x", Finished: true, Claim: res.Jobs[0].Claims}}}))
		require.NoError(t, s.PauseQueue(ctx, "held", t0))
		_, err := s.RetryJobs(ctx, engine.At(t0), got[:1])
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
		require.Empty(t, claim(t, s, pid, t0, 5, "held").Jobs, "a paused queue's retried job is not claimed")
		require.Equal(t, engine.StateBlocked, state(t, s, got[2]).State)
		_, err = s.CancelJobs(ctx, engine.At(t0), got[1:2], "")
		require.NoError(t, err)
		require.Equal(t, got[2:], ids(claim(t, s, pid, t0, 5, "open").Jobs), "the slot went to the other queue's blocked job")
		heldMatchesHolders(t, s, "pq/a")
		require.NoError(t, s.ResumeQueue(ctx, "held", t0))
		require.Equal(t, got[:1], ids(claim(t, s, pid, t0, 5, "held").Jobs))
	})
}

// A running job whose worker was presumed dead comes back ready, holding
// its slot; an operator then cancels (or retries) it. The lost run's
// result, written late, changes nothing: no resurrection, no slot given
// back twice.
func TestOperatorLateResultOfAReapedRunAfterAnOperatorActs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, verb := range []string{"cancel", "retry"} {
			key := "late/" + verb
			got := enqueue(t, s, t0, slotted(key, 1), slotted(key, 1))
			lost := register(t, s, t0)
			res := claim(t, s, lost, t0, 1)
			require.Equal(t, got[:1], ids(res.Jobs))
			live := register(t, s, at(10*time.Minute))
			n, err := s.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			j := state(t, s, got[0])
			require.Equal(t, engine.StateReady, j.State)
			require.True(t, j.HoldsSlot)
			now := at(11 * time.Minute)
			if verb == "cancel" {
				_, err = s.CancelJobs(ctx, engine.At(now), got[:1], "")
				require.NoError(t, err)
				require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "the slot went to the blocked job")
			} else {
				_, err = s.RetryJobs(ctx, engine.At(now), got[:1])
				require.NoError(t, err)
				require.Equal(t, 0, state(t, s, got[0]).Attempt)
				// The retried job runs again on the live worker.
				res2 := claim(t, s, live, now, 1)
				require.Equal(t, got[:1], ids(res2.Jobs))
			}
			heldMatchesHolders(t, s, key)
			// The lost run's result, late: completed, and holding its slot.
			err = s.Finish(ctx, lost, engine.At(at(12*time.Minute)), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)})
			if err != nil {
				require.NotContains(t, err.Error(), "panic")
			}
			j = state(t, s, got[0])
			if verb == "cancel" {
				require.Equal(t, engine.StateCancelled, j.State, "no resurrection")
				require.Equal(t, engine.StateReady, state(t, s, got[1]).State)
			} else {
				require.Equal(t, engine.StateRunning, j.State, "the new run is untouched")
				require.Equal(t, live, j.ProcessID)
				require.True(t, j.HoldsSlot)
				require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
			}
			sem := heldMatchesHolders(t, s, key)
			require.Equal(t, 1, sem.Held)
			// Clean the key for the next verb.
			for _, id := range got {
				if j := state(t, s, id); j.State == engine.StateReady || j.State == engine.StateBlocked {
					_, err := s.CancelJobs(ctx, engine.At(now), []int64{id}, "")
					require.NoError(t, err)
				}
			}
		}
	})
}

// A job waiting out a retry's backoff keeps its slot (docs/concurrency.md);
// an operator's retry keeps it (no second slot), and a cancel gives it back
// once, to the key's blocked job.
func TestOperatorBackoffHolderRetriedThenCancelledGivesItsSlotBackOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("bo/a", 1), slotted("bo/a", 1), slotted("bo/a", 1))
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 1)
		require.Equal(t, got[:1], ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: []engine.Transition{
			{ID: got[0], State: engine.StateScheduled, RunAt: at(time.Hour), Error: "boom", Claim: res.Jobs[0].Claims}}}))
		j := state(t, s, got[0])
		require.Equal(t, engine.StateScheduled, j.State)
		require.True(t, j.HoldsSlot, "a retry keeps its slot while it waits")
		for range 2 {
			_, err := s.RetryJobs(ctx, engine.At(at(time.Second)), got[:1])
			require.NoError(t, err)
			require.Equal(t, 1, heldMatchesHolders(t, s, "bo/a").Held)
		}
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
		_, err := s.CancelJobs(ctx, engine.At(at(time.Second)), got[:1], "")
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State)
		require.Equal(t, engine.StateBlocked, state(t, s, got[2]).State, "one slot given back, one job unblocked")
		require.Equal(t, 1, heldMatchesHolders(t, s, "bo/a").Held)
		_, err = s.CancelJobs(ctx, engine.At(at(time.Second)), got[:1], "")
		require.ErrorContains(t, err, "it is cancelled")
		require.Equal(t, engine.StateBlocked, state(t, s, got[2]).State, "a second cancel gives nothing back")
		require.Equal(t, 1, heldMatchesHolders(t, s, "bo/a").Held)
	})
}
