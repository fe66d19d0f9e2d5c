package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// concJob is a job of one concurrency key.
func concJob(key string, to int, d time.Duration) engine.NewJob {
	j := job("k", "default", 0)
	j.Conc = &engine.Conc{Key: key, To: to, Duration: d}
	return j
}

// Guards docs/concurrency.md's "never more than To jobs of one key running
// at once" and "Lost slots": a SIGKILLed worker's key is freed after
// Duration, and its running jobs are recovered when its heartbeat expires.
// With Duration (default 3m) shorter than DeadAfter (5m) the key is freed
// first and a blocked job takes the slot; the lost job was then recovered
// ready without a slot (its key's expiry took it) and claimed beside the
// new holder: 2 running with To 1. A recovered job that holds no slot now
// takes a free one or is blocked.
func TestConcRecoveredJobAfterExpiryDoesNotRunBesideTheNewHolder(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("a", 1, time.Minute), concJob("a", 1, time.Minute))
		dead := register(t, s, t0)
		require.Equal(t, []int64{got[0]}, ids(claim(t, s, dead, t0, 1).Jobs))

		// The key is freed after Duration; the blocked job takes the slot
		// and a live worker runs it.
		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Equal(t, 1, unblocked)
		live := register(t, s, at(time.Minute+time.Second))
		require.Equal(t, []int64{got[1]}, ids(claim(t, s, live, at(time.Minute+2*time.Second), 1).Jobs))

		// The dead process's heartbeat expires; its job is recovered.
		n, err := s.ReapDeadProcesses(ctx, engine.At(at(5*time.Minute+10*time.Second)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// got[1] still runs and holds the key's only slot: the recovered
		// job must not be claimable now.
		require.Equal(t, engine.StateRunning, state(t, s, got[1]).State)
		again := claim(t, s, live, at(5*time.Minute+11*time.Second), 10)
		require.NotContains(t, ids(again.Jobs), got[0],
			"the recovered job runs beside the key's holder: 2 running with To 1 (its state after recovery: holds_slot=%v)", state(t, s, got[0]).HoldsSlot)
	})
}

// Guards docs/concurrency.md's "never more than To jobs of one key running
// at once" and that Duration frees only the slots of running holders
// ("Lost slots"). A ready job holds its slot until it is claimed; when no
// worker claimed it for Duration (workers down for a deploy, a paused
// queue, busy workers) the dispatcher freed the key and handed the slot to
// a blocked job while the first stayed ready without one: both were
// claimed together, 2 running with To 1, though neither was lost. A ready
// or scheduled holder now keeps its slot when its key expires.
func TestConcUnclaimedReadyHolderKeepsItsSlotWhenItsKeyExpires(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("a", 1, time.Minute), concJob("a", 1, time.Minute))
		require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
		_, _, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		pid := register(t, s, at(2*time.Minute))
		claimed := ids(claim(t, s, pid, at(2*time.Minute), 10).Jobs)
		require.LessOrEqual(t, len(claimed), 1, "claimed %v together, To is 1 (states before: %s holds=%v, %s holds=%v)",
			claimed, state(t, s, got[0]).State, state(t, s, got[0]).HoldsSlot, state(t, s, got[1]).State, state(t, s, got[1]).HoldsSlot)
		require.Equal(t, []int64{got[0]}, claimed, "the holder runs, in its turn")
		require.Equal(t, 1, semaphore(t, s, "a").Held)
	})
}

// Guards docs/concurrency.md's "Lowering To ... takes no slot from a job
// that holds one: no slot is handed out until the holders are fewer than
// the new To." It held when a review checked it; this keeps it held.
func TestConcLoweredToHandsNoSlotUntilHoldersAreFewer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("a", 2, time.Minute), concJob("a", 2, time.Minute))
		low := enqueue(t, s, t0, concJob("a", 1, time.Minute), concJob("a", 1, time.Minute))
		require.Equal(t, engine.StateBlocked, state(t, s, low[0]).State)
		pid := register(t, s, t0)
		require.ElementsMatch(t, got, ids(claim(t, s, pid, t0, 10).Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, got[:1]...), SlotHolders: runs(t, s, got[:1]...)}))
		require.Equal(t, engine.StateBlocked, state(t, s, low[0]).State, "1 holder is not fewer than the new To 1")
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Second)), 100)
		require.NoError(t, err)
		require.Zero(t, unblocked)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, got[1:]...), SlotHolders: runs(t, s, got[1:]...)}))
		require.Equal(t, engine.StateReady, state(t, s, low[0]).State)
		require.Equal(t, engine.StateBlocked, state(t, s, low[1]).State)
		sem := semaphore(t, s, "a")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Limit)
	})
}

// Guards docs/rate-limits.md's Keys rules, which concurrency keys follow:
// a key with a NUL, over 255 bytes (16 KiB here) or with a trailing space
// is refused at enqueue and nothing is written, even beside a good job in
// the same call. It held when a review checked it; this keeps it held.
func TestConcBadKeysAreRefusedAndNothingIsWritten(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, bad := range []string{"a\x00b", string(make([]byte, 16<<10)), "acct "} {
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{concJob("good", 1, time.Minute), concJob(bad, 1, time.Minute)})
			require.Error(t, err)
			require.ErrorContains(t, err, "concurrency key")
		}
		all, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Empty(t, all, "no semaphore row was written")
		got := enqueue(t, s, t0, concJob("good", 1, time.Minute))
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
	})
}

// Guards "A job released by a worker's shutdown ... keeps its slot and runs
// again" (docs/concurrency.md) where the job has no slot left to keep: it
// ran past Duration, its key expired and a blocked job took the slot. It
// was released ready without a slot and claimed beside the new holder; it
// is now blocked until the slot comes back, and takes it then.
func TestConcReleasedJobAfterExpiryIsBlockedUntilASlotIsFree(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("a", 1, time.Minute), concJob("a", 1, time.Minute))
		slow := register(t, s, t0)
		require.Equal(t, []int64{got[0]}, ids(claim(t, s, slow, t0, 1).Jobs))
		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, []int{1, 1}, []int{freed, unblocked})
		other := register(t, s, at(time.Minute+time.Second))
		require.Equal(t, []int64{got[1]}, ids(claim(t, s, other, at(time.Minute+2*time.Second), 1).Jobs))

		// The slow worker shuts down before its job finishes.
		require.NoError(t, s.Release(ctx, slow, engine.At(at(2*time.Minute)), runs(t, s, got[:1]...)))
		require.Equal(t, engine.StateBlocked, state(t, s, got[0]).State)
		require.Empty(t, claim(t, s, slow, at(2*time.Minute), 10).Jobs)

		// The holder finishes: its slot goes to the released job.
		require.NoError(t, s.Finish(ctx, other, engine.At(at(3*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[1:]...), SlotHolders: runs(t, s, got[1:]...)}))
		j := state(t, s, got[0])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot)
		require.Equal(t, 1, semaphore(t, s, "a").Held)
	})
}

// The same as a worker's result says it (the handler returned as the
// worker shut down: a ready transition in Finish): a job that lost its
// slot while it ran takes a free one, with none blocked ahead of it.
func TestConcJobReleasedByItsResultAfterExpiryTakesAFreeSlot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, concJob("a", 1, time.Minute))
		pid := register(t, s, t0)
		require.Equal(t, got, ids(claim(t, s, pid, t0, 1).Jobs))
		freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Zero(t, semaphore(t, s, "a").Held)

		release := engine.Transition{ID: got[0], Claim: 1, State: engine.StateReady, RunAt: at(2 * time.Minute), AttemptDelta: -1}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(2*time.Minute)), engine.Outcomes{Others: []engine.Transition{release}}))
		j := state(t, s, got[0])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot, "it took the free slot")
		require.Equal(t, 1, semaphore(t, s, "a").Held)
	})
}
