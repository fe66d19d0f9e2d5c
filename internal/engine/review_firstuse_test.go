package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Review of rows sluice creates on first use inside a transaction
// (semaphores, fairness keys, coalesce keys) when that transaction is the
// app's own (EnqueueTx) and rolls back, or is held open.

// blockedBy returns how many sessions wait for a lock, directly or behind
// another waiter, on the session holder (SessionID), reading through s's
// pool.
func blockedBy(ctx context.Context, t *testing.T, s *engine.Store, holder int64) int {
	t.Helper()
	var q string
	switch s.Dialect().Name() {
	case "postgres":
		q = "SELECT a.pid, b FROM pg_stat_activity a, unnest(pg_blocking_pids(a.pid)) b WHERE a.wait_event_type = 'Lock'"
	case "mysql":
		q = `SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id`
	}
	rows, err := s.DB().Query(ctx, q)
	require.NoError(t, err)
	waits := map[int64][]int64{} // blocker -> waiters
	for rows.Next() {
		var w, b int64
		require.NoError(t, rows.Scan(&w, &b))
		waits[b] = append(waits[b], w)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	seen := map[int64]bool{holder: true}
	next := []int64{holder}
	for len(next) > 0 {
		b := next[0]
		next = next[1:]
		for _, w := range waits[b] {
			if !seen[w] {
				seen[w] = true
				next = append(next, w)
			}
		}
	}
	return len(seen) - 1
}

// awaitBlockedBy returns once n sessions wait on holder (blockedBy), and
// fails after ten seconds.
func awaitBlockedBy(t *testing.T, s *engine.Store, holder int64, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	every := 5 * time.Millisecond
	if s.Dialect().Name() == "mysql" {
		every = 150 * time.Millisecond // INNODB_TRX's cache (testdb.AwaitLockWait)
	}
	for blockedBy(context.Background(), t, s, holder) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions never waited on session %d", n, holder)
		}
		time.Sleep(every)
	}
}

// An app's transaction enqueues the first job of a concurrency key (or of
// a fairness key), making the key's row, while two other transactions of
// the app's wait to make the same row, then rolls back. On MySQL InnoDB
// turns both waiters' locks into gap locks when the row vanishes and one
// of them gets a deadlock (1213) back in its own transaction, at READ
// COMMITTED too. docs/concurrency.md says sluice's transactions "do not
// deadlock on semaphores with each other, nor with an EnqueueTx in your
// own transaction" and lists "the exceptions, all rare": this case is
// listed only for a coalesce key's row, and docs/fairness.md says nothing
// of it for fairness keys. (When the waiters are sluice's own
// transactions, a plain Enqueue, the deadlock is run again and both
// succeed: checked, it holds.) An empty semaphore row admits as a
// missing one, so the row could be made outside the app's transaction,
// committed at once, as a claim's missing budgets are (missingBudgets).
func TestReviewAnEnqueueTxWaitingOnANewRowThatRollsBackGetsNoDeadlock(t *testing.T) {
	kinds := map[string]func() engine.NewJob{
		"semaphore": func() engine.NewJob { return concJob("acct/new", 1, time.Minute) },
		"fair":      func() engine.NewJob { return fairJob("tenant/new", 0) },
	}
	for _, kind := range []string{"semaphore", "fair"} {
		// app: the app's pool (MySQL at its default REPEATABLE READ);
		// rc: a pool opened as sluice opens its own (READ COMMITTED).
		for _, waiter := range []string{"app", "rc"} {
			t.Run(kind+"/"+waiter, func(t *testing.T) {
				eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
					if s.Dialect().Name() == "sqlite" {
						t.Skip("one writer: the transactions cannot interleave")
					}
					ctx := context.Background()
					first := app().begin(t)
					_, err := s.Enqueue(ctx, first.ex, engine.At(t0), []engine.NewJob{kinds[kind]()})
					require.NoError(t, err)
					var wg sync.WaitGroup
					errs := make([]error, 2)
					for i := 0; i < 2; i++ {
						var w *engine.Store
						var tx appTx
						if waiter == "app" {
							a := app()
							w, tx = a.s, a.begin(t)
						} else {
							w = open()
							etx, err := w.DB().Begin(ctx)
							require.NoError(t, err)
							tx = appTx{ex: etx, commit: func() error { return etx.Commit(ctx) }, rollback: func() { _ = etx.Rollback(ctx) }}
						}
						wg.Add(1)
						go func(i int) {
							defer wg.Done()
							if _, errs[i] = w.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{kinds[kind]()}); errs[i] != nil {
								tx.rollback()
								return
							}
							errs[i] = tx.commit()
						}(i)
					}
					awaitBlockedBy(t, s, first.sid, 2)
					first.rollback()
					wg.Wait()
					for i, err := range errs {
						require.NoError(t, err, fmt.Sprintf("waiter %d's transaction", i))
					}
				})
			})
		}
	}
}

// waitsOn runs fn in a goroutine and reports whether it came to wait for a
// lock behind the session holder (blockedBy) before it returned; fn's
// error is returned once it has returned, which the caller lets happen by
// ending holder's transaction (release).
func waitsOn(t *testing.T, s *engine.Store, holder int64, fn func() error, release func()) (waited bool, err error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = fn()
	}()
	every := 5 * time.Millisecond
	if s.Dialect().Name() == "mysql" {
		every = 150 * time.Millisecond
	}
	deadline := time.Now().Add(10 * time.Second)
	for !waited {
		select {
		case <-done:
			release()
			return false, err
		default:
		}
		if blockedBy(context.Background(), t, s, holder) > 0 {
			waited = true
			logWaiting(t, s)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("neither returned nor waited in 10s")
		}
		time.Sleep(every)
	}
	release()
	<-done
	return waited, err
}

// An app's transaction enqueues the first job of concurrency key c since
// the hourly clean-up deleted its idle row (docs/concurrency.md, "Idle
// keys": "the key's next enqueue creates it again"), and stays open a
// while (the app's request goes on after EnqueueTx). Meanwhile a delayed
// job of c comes due, with a delayed job that has no limit at all. The
// dispatcher's promotion locks c's semaphore, waiting for the app's
// transaction, and with it every due job of its batch: the unlimited job,
// and every other queue's and key's, wait for the app's commit, and so do
// the dispatcher's other duties (its tick runs them after the promotion).
// A reap was made to wait for no semaphore another transaction holds for
// this reason (docs/guarantees.md, "an app's open transaction"); the
// promotion was not. The same holds for a row that exists (any EnqueueTx
// of a concurrency-limited kind locks its key's row until it commits).
func TestReviewADueJobWaitsForNoAppTransactionHoldingAnotherKeysNewSemaphore(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		d := concJob("c", 1, time.Minute)
		d.RunAt = at(3 * time.Hour)
		u := job("k", "default", 0)
		u.RunAt = at(3 * time.Hour)
		ids := enqueue(t, s, t0, d, u)
		cleared, err := s.ClearIdleSemaphores(ctx, engine.At(at(2*time.Hour)), time.Hour, 500, 0)
		require.NoError(t, err)
		require.Equal(t, 1, cleared, "c's row, idle for two hours, is deleted")

		a := app()
		tx := a.begin(t)
		got, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(3*time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, got[0].State, "the app's job makes c's row again and takes its slot")

		var n int
		waited, err := waitsOn(t, s, tx.sid, func() error {
			var err error
			n, _, err = s.Promote(ctx, engine.At(at(3*time.Hour+time.Second)), 500)
			return err
		}, tx.rollback)
		require.NoError(t, err)
		require.False(t, waited, "the dispatcher's promotion of the unlimited job %d waited for the app's open transaction, which holds only c", ids[1])
		require.Equal(t, engine.StateReady, state(t, s, ids[1]).State)
		require.Positive(t, n)
	})
}

// The same for a worker's claim that promotes due jobs waiting on a rate
// limit (ClaimParams.PromoteDue, which a worker sets whenever a slot it
// knows of has come and when it polls): job j2 of budget k/a and
// concurrency key c was deferred (giving c's slot back) and its slot has
// come; c's idle row was cleared; an app's open transaction makes c's row
// again. The claim's promotion waits for the app's transaction, and the
// worker's unlimited job u with it, though docs/rate-limits.md promises
// "Unlimited jobs do not wait for a budget another claim holds" and a
// claim "takes its unlimited jobs and the limited ones whose budgets are
// free": here not even a budget, a semaphore of an app's transaction.
func TestReviewAClaimsUnlimitedJobsWaitForNoAppTransactionHoldingANewSemaphore(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, 10*time.Second, 1)}
		j1 := enqueue(t, s, t0, limited("k", "k/a"))[0]
		j2 := enqueue(t, s, t0, concLimited("k/a", "c", 1))[0]
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 5, lim, engine.DefaultHorizon)
		require.Equal(t, []int64{j1}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, j2).State, "deferred to its slot, giving c's slot back")
		cleared, err := s.ClearIdleSemaphores(ctx, engine.At(at(2*time.Hour)), time.Hour, 500, 0)
		require.NoError(t, err)
		require.Equal(t, 1, cleared, "c's row, idle for two hours, is deleted")
		u := enqueue(t, s, at(2*time.Hour), job("k", "default", 0))[0]

		a := app()
		tx := a.begin(t)
		_, err = a.s.Enqueue(ctx, tx.ex, engine.At(at(2*time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)

		var claimed *engine.ClaimResult
		waited, err := waitsOn(t, s, tx.sid, func() error {
			var err error
			claimed, err = s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5,
				Clock: engine.At(at(2 * time.Hour)), Limits: lim, PromoteDue: true})
			return err
		}, tx.rollback)
		require.NoError(t, err)
		require.False(t, waited, "the claim waited for the app's open transaction before taking unlimited job %d", u)
		require.Contains(t, ids(claimed.Jobs), u)
	})
}

// logWaiting logs the statements that wait for a lock (PostgreSQL), to
// show where a wait is.
func logWaiting(t *testing.T, s *engine.Store) {
	if s.Dialect().Name() != "postgres" {
		return
	}
	rows, err := s.DB().Query(context.Background(), "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%sluice%'")
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var q string
		require.NoError(t, rows.Scan(&q))
		t.Logf("waits: %.200s", q)
	}
}

// An app's transaction enqueues job J1 of concurrency key c (To 1,
// Duration 1 minute), making c's row and taking its slot, and commits
// late: 5 minutes after (the app's request went on; the same happens to a
// job that waits ready behind a backlog for longer than Duration). J2 of
// c, enqueued then, is blocked. A worker claims J1 at once, and the
// dispatcher's next tick, a second later, finds c's slot expired (its
// activity was stamped when J1 took the slot, inside the app's
// transaction, and a claim stamps none), presumes J1 lost after one second
// of running, and hands its slot to J2: two jobs of c run at once under
// To 1. docs/concurrency.md: "Only running jobs are presumed lost: a ready
// or scheduled job that holds a slot (waiting for a worker ...) keeps it
// however long it waits", and the overlap is promised only for "a job
// that runs longer than Duration without its key seeing any other
// activity" ("Set Duration above your longest run").
func TestReviewAJobWhoseSlotWasTakenInALateCommitKeepsItOnceItRuns(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		a := app()
		tx := a.begin(t)
		got, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, got[0].State)
		j1 := got[0].ID
		require.NoError(t, tx.commit(), "the app commits, 5 minutes later")
		j2 := enqueue(t, s, at(5*time.Minute), concJob("c", 1, time.Minute))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, j2).State)
		pid := register(t, s, at(5*time.Minute))
		require.Equal(t, []int64{j1}, ids(claim(t, s, pid, at(5*time.Minute), 5).Jobs))

		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(5*time.Minute+time.Second)), 100)
		require.NoError(t, err)
		running := claim(t, s, pid, at(5*time.Minute+time.Second), 5).Jobs
		require.Empty(t, ids(running), "J2 (%d) runs beside J1 under To 1", j2)
		require.Zero(t, freed, "J1 has run for a second, not its Duration: its slot is not presumed lost")
		require.Zero(t, unblocked)
	})
}
