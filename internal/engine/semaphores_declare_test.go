package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// declaration is the limit To (Duration 3 minutes, as slotted's) on the
// semaphores of scope.
func declaration(scope string, to int) engine.SlotDeclaration {
	return engine.SlotDeclaration{Scope: scope, To: to, Duration: 3 * time.Minute}
}

// backlog enqueues n jobs of key under To at t0 and claims those that
// took a slot: they run, holding it; the others are blocked.
func backlog(t *testing.T, s *engine.Store, key string, to, n int) (pid int64, running, blocked []int64) {
	t.Helper()
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = slotted(key, to)
	}
	got := enqueue(t, s, t0, jobs...)
	pid = register(t, s, t0)
	require.ElementsMatch(t, got[:to], ids(claim(t, s, pid, t0, n).Jobs))
	return pid, got[:to], got[to:]
}

// countStates counts the jobs of ids in each state.
func countStates(t *testing.T, s *engine.Store, ids []int64) map[engine.State]int {
	t.Helper()
	out := map[engine.State]int{}
	for _, id := range ids {
		out[state(t, s, id).State]++
	}
	return out
}

// docs/concurrency.md, "Raising To": a worker's start declares its To on
// the semaphores of its scope. A key at To 2 with 2 running holders and 10
// blocked jobs, declared at 5, hands 3 blocked jobs a slot in the same
// transaction; the dispatcher's next upkeep hands out none more (5
// holders, never more), and a finishing holder's slot goes to the next
// blocked job. The semaphores of other scopes (one that merely starts
// alike) are left alone; the bare scope's key is the scope's. A second
// declaration of the same limit locks and writes nothing. Before, the key
// stayed at 2 until a new job of that very key was enqueued.
func TestDeclaringARaisedLimitHandsItsNewSlotsToBlockedJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid, running, blocked := backlog(t, s, "acct/1", 2, 12)
		enqueue(t, s, t0, slotted("acct", 2), slotted("acct-x/1", 2), slotted("acctx", 2))

		got, err := s.DeclareSemaphores(ctx, engine.At(at(time.Second)), declaration("acct", 5))
		require.NoError(t, err)
		require.Equal(t, engine.Declared{Changed: 2, Unblocked: 3}, got)
		sem := semaphore(t, s, "acct/1")
		require.Equal(t, 5, sem.Limit)
		require.Equal(t, 5, sem.Held)
		require.Equal(t, 7, sem.Blocked)
		require.Equal(t, map[engine.State]int{engine.StateReady: 3, engine.StateBlocked: 7}, countStates(t, s, blocked))
		require.Equal(t, 5, semaphore(t, s, "acct").Limit)
		require.Equal(t, 2, semaphore(t, s, "acct-x/1").Limit, "another scope")
		require.Equal(t, 2, semaphore(t, s, "acctx").Limit, "another scope")

		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Second)), 100)
		require.NoError(t, err)
		require.Zero(t, unblocked, "the declaration handed out every slot it freed")
		require.Equal(t, 5, semaphore(t, s, "acct/1").Held)

		rs, rec := testdb.Record(s)
		got, err = rs.DeclareSemaphores(ctx, engine.At(at(3*time.Second)), declaration("acct", 5))
		require.NoError(t, err)
		require.Equal(t, engine.Declared{}, got)
		require.Equal(t, 1, testdb.Count(rec.Take(), "sluice_semaphores"), "one read that finds nothing to declare")

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(4*time.Second)), engine.Outcomes{Completed: runs(t, s, running[0]), SlotHolders: runs(t, s, running[0])}))
		require.Equal(t, 5, semaphore(t, s, "acct/1").Held)
		require.Equal(t, map[engine.State]int{engine.StateReady: 4, engine.StateBlocked: 6}, countStates(t, s, blocked))
	})
}

// docs/concurrency.md, "Lowering To": declared lower, a key's holders keep
// their slots, and no slot is handed out until they are fewer than the new
// To: 5 holders under a declared 2 finish one by one, and only the fourth
// to finish (leaving 1) hands its slot on.
func TestDeclaringALoweredLimitHandsOutNoSlotUntilTheHoldersAreFewer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid, running, blocked := backlog(t, s, "acct/1", 5, 10)

		got, err := s.DeclareSemaphores(ctx, engine.At(at(time.Second)), declaration("acct", 2))
		require.NoError(t, err)
		require.Equal(t, engine.Declared{Changed: 1}, got)
		sem := semaphore(t, s, "acct/1")
		require.Equal(t, 2, sem.Limit)
		require.Equal(t, 5, sem.Held, "no holder loses its slot")

		for i, id := range running {
			now := at(time.Duration(i+2) * time.Second)
			require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runs(t, s, id), SlotHolders: runs(t, s, id)}))
			_, _, err := s.MaintainSemaphores(ctx, engine.At(now), 100)
			require.NoError(t, err)
			ready := countStates(t, s, blocked)[engine.StateReady]
			switch held := 5 - (i + 1); {
			case held >= 2:
				require.Zero(t, ready, "%d holders left: no slot under To 2", held)
				require.Equal(t, held, semaphore(t, s, "acct/1").Held)
			default:
				require.Equal(t, 2-held, ready, "%d holders left", held)
				require.Equal(t, 2, semaphore(t, s, "acct/1").Held)
			}
		}
	})
}

// A scope with more semaphores than one transaction changes: 1,200 keys,
// each with a holder and every tenth with a blocked job too, declared 100
// a transaction, all get the new limit and each blocked job a slot, in 13
// reads (12 full pages and one that finds none left).
func TestDeclaringALimitReachesMoreSemaphoresThanOneBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const n = 1200
		jobs := make([]engine.NewJob, 0, n+n/10)
		for i := range n {
			k := fmt.Sprintf("acct/%d", i)
			jobs = append(jobs, slotted(k, 1))
			if i%10 == 0 {
				jobs = append(jobs, slotted(k, 1))
			}
		}
		enqueue(t, s, t0, jobs...)

		rs, rec := testdb.Record(s)
		d := declaration("acct", 2)
		d.Batch = 100
		got, err := rs.DeclareSemaphores(ctx, engine.At(at(time.Second)), d)
		require.NoError(t, err)
		require.Equal(t, engine.Declared{Changed: n, Unblocked: n / 10}, got)
		reads := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "limit_to <>") {
				reads++
			}
		}
		require.Equal(t, 13, reads)
		all, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Len(t, all, n)
		two := 0
		for _, sem := range all {
			require.Equal(t, 2, sem.Limit, sem.Name)
			require.Equal(t, sem.Holding, sem.Held, sem.Name)
			require.Zero(t, sem.Blocked, sem.Name)
			if sem.Held == 2 {
				two++
			}
		}
		require.Equal(t, n/10, two, "the keys with a blocked job have two holders")
	})
}

// A semaphore another transaction holds — an app's open transaction that
// enqueued a job of the key — does not hold up the declaration: it is
// left as it is and returned as busy, and the other keys are declared at
// once. Declared again by name once the app's transaction ends, it gets
// the limit. A raised key whose one blocked job another transaction holds
// gets no slot handed by the declaration, and the dispatcher's next upkeep
// hands it one.
func TestDeclaringALimitSkipsTheSemaphoresAnotherTransactionHolds(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		busyKey := slotted("acct/2", 2)
		ids := enqueue(t, s, t0, slotted("acct/1", 1), slotted("acct/1", 1), slotted("acct/3", 1), slotted("acct/3", 1), busyKey)
		lockedJob := ids[3]
		require.Equal(t, engine.StateBlocked, state(t, s, lockedJob).State)

		a := app()
		tx := a.begin(t)
		_, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{busyKey})
		require.NoError(t, err)
		rows, err := tx.ex.Query(ctx, fmt.Sprintf("SELECT id FROM sluice_jobs WHERE id = %d FOR UPDATE", lockedJob))
		require.NoError(t, err)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		rows.Close()

		var got engine.Declared
		returned, err := returnsWhileOpen(t, func() error {
			var err error
			got, err = s.DeclareSemaphores(ctx, engine.At(at(time.Second)), declaration("acct", 3))
			return err
		}, func() { require.NoError(t, tx.commit()) })
		require.NoError(t, err)
		require.True(t, returned, "the declaration waited for the app's transaction")
		require.Equal(t, engine.Declared{Changed: 2, Unblocked: 1, Busy: []string{"acct/2"}}, got)
		require.Equal(t, 3, semaphore(t, s, "acct/1").Limit)
		require.Equal(t, 2, semaphore(t, s, "acct/1").Held)
		require.Equal(t, 2, semaphore(t, s, "acct/2").Limit, "held by the app: left as it was")
		require.Equal(t, 3, semaphore(t, s, "acct/3").Limit)
		require.Equal(t, 1, semaphore(t, s, "acct/3").Held, "its one blocked job was locked")

		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, lockedJob).State)

		d := declaration("acct", 3)
		d.Keys = got.Busy
		got, err = s.DeclareSemaphores(ctx, engine.At(at(3*time.Second)), d)
		require.NoError(t, err)
		require.Equal(t, engine.Declared{Changed: 1}, got)
		require.Equal(t, 3, semaphore(t, s, "acct/2").Limit)
		require.Equal(t, 2, semaphore(t, s, "acct/2").Held)
	})
}

// Declared by name with Wait, a semaphore another transaction holds — an
// app's open transaction that enqueued a job of the key — is waited for,
// as an enqueue waits, and gets the limit once the transaction commits.
// Each key is declared in a transaction of its own: the one no one holds
// is declared and committed while the other is waited for, and an enqueue
// of it meanwhile goes through.
func TestDeclaringALimitByNameWithWaitWaitsForEachHeldKeyAlone(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		enqueue(t, s, t0, slotted("acct/1", 2), slotted("acct/2", 2))
		a := app()
		tx := a.begin(t)
		_, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{slotted("acct/2", 2)})
		require.NoError(t, err)

		d := declaration("acct", 3)
		d.Keys, d.Wait = []string{"acct/2", "acct/1"}, true
		var got engine.Declared
		done := make(chan error, 1)
		go func() {
			var err error
			got, err = s.DeclareSemaphores(ctx, engine.At(at(time.Second)), d)
			done <- err
		}()
		testdb.WaitForLockWaits(t, s, 1, "sluice_semaphores", "FROM sluice_semaphores", "FOR UPDATE")
		require.Equal(t, 3, semaphore(t, s, "acct/1").Limit, "declared in a transaction of its own, before the held key")
		require.Equal(t, 2, semaphore(t, s, "acct/2").Limit, "held by the app")
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = s.Enqueue(bounded, nil, engine.At(at(time.Second)), []engine.NewJob{slotted("acct/1", 3)})
		require.NoError(t, err, "acct/1 is not held while the declaration waits")
		select {
		case err := <-done:
			t.Fatalf("the declaration returned (%v) while the app held acct/2", err)
		default:
		}

		require.NoError(t, tx.commit())
		require.NoError(t, <-done)
		require.Equal(t, engine.Declared{Changed: 2}, got)
		require.Equal(t, 3, semaphore(t, s, "acct/2").Limit)
		require.Equal(t, 2, semaphore(t, s, "acct/2").Held)
	})
}
