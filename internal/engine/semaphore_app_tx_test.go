package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Rows sluice makes on first use inside a transaction (semaphores, fairness
// keys) when that transaction is the app's own (EnqueueTx), held open or
// rolled back.

// A due job of concurrency key c whose semaphore an app's open
// transaction holds (its EnqueueTx of a job of c locks c's row until it
// commits; a new row, made again after the hourly clean-up deleted the
// idle one, or a row that exists) used to hold the dispatcher's whole
// promotion: its due jobs were locked, then it waited for c's row, and
// every due job of the batch (an unlimited one too) and the rest of the
// tick waited for the app's commit. The promotion now leaves c's due job
// due and promotes the others at once, a due job of a key whose row is
// merely missing (deleted as idle, no one making it) among them; once
// the app's transaction ends, the next promotion promotes c's job as any:
// a free slot (the app rolled back), or, the slot taken (it committed),
// blocked or, under Discard, discarded.
func TestADueJobWaitsForNoAppTransactionHoldingAnotherKeysSemaphore(t *testing.T) {
	for _, row := range []string{"new", "existing"} {
		t.Run(row, func(t *testing.T) {
			eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
				if s.Dialect().Name() == "sqlite" {
					t.Skip("one writer: an open transaction stops every other")
				}
				ctx := context.Background()
				d := concJob("c", 1, time.Minute)
				d.RunAt = at(3 * time.Hour)
				d.Conc.Discard = row == "existing"
				u := job("k", "default", 0)
				u.RunAt = at(3 * time.Hour)
				m := concJob("m", 1, time.Minute)
				m.RunAt = at(3 * time.Hour)
				ids := enqueue(t, s, t0, d, u, m)
				if row == "new" {
					cleared, err := s.ClearIdleSemaphores(ctx, engine.At(at(2*time.Hour)), time.Hour, 500, 0)
					require.NoError(t, err)
					require.Equal(t, 2, cleared, "c's and m's rows, idle for two hours, are deleted")
				}

				a := app()
				tx := a.begin(t)
				got, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(3*time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
				require.NoError(t, err)
				require.Equal(t, engine.StateReady, got[0].State, "the app's job takes c's slot")

				var n int
				end := tx.rollback
				if row == "existing" {
					end = func() { require.NoError(t, tx.commit()) }
				}
				returned, err := returnsWhileOpen(t, func() error {
					var err error
					n, _, err = s.Promote(ctx, engine.At(at(3*time.Hour+time.Second)), 500)
					return err
				}, end)
				require.NoError(t, err)
				require.True(t, returned, "the promotion waited for the app's open transaction, which holds only c")
				require.Equal(t, 2, n, "u and m are promoted; d is left due")
				require.Equal(t, engine.StateReady, state(t, s, ids[1]).State)
				require.Equal(t, engine.StateReady, state(t, s, ids[2]).State, "m's missing row is made: no one else makes it")
				require.True(t, state(t, s, ids[2]).HoldsSlot)
				require.Equal(t, engine.StateScheduled, state(t, s, ids[0]).State, "d is left due, not discarded nor blocked")

				n, _, err = s.Promote(ctx, engine.At(at(3*time.Hour+2*time.Second)), 500)
				require.NoError(t, err)
				require.Equal(t, 1, n)
				if row == "new" {
					require.Equal(t, engine.StateReady, state(t, s, ids[0]).State, "the app rolled back: c's slot is free")
					require.True(t, state(t, s, ids[0]).HoldsSlot)
				} else {
					require.Equal(t, engine.StateCancelled, state(t, s, ids[0]).State, "the app's job holds c's slot: d is discarded")
				}
				require.Equal(t, 1, semaphore(t, s, "c").Held)
			})
		})
	}
}

// The same for a worker's claim that promotes due jobs waiting on a rate
// limit (ClaimParams.PromoteDue, which a worker sets whenever a slot it
// knows of has come and when it polls): job j2 of budget k/a and
// concurrency key c was deferred (giving c's slot back) and its slot has
// come; c's idle row was cleared; an app's open transaction makes c's row
// again. The claim's promotion waited for the app's transaction, and the
// worker's unlimited job u with it. The claim now takes u at once and
// leaves j2 due; a claim after the app's transaction ended takes j2.
func TestAClaimsUnlimitedJobsWaitForNoAppTransactionHoldingANewSemaphore(t *testing.T) {
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

		claimDue := func(at time.Time) (*engine.ClaimResult, error) {
			return s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5,
				Clock: engine.At(at), Limits: lim, PromoteDue: true})
		}
		var claimed *engine.ClaimResult
		returned, err := returnsWhileOpen(t, func() error {
			var err error
			claimed, err = claimDue(at(2 * time.Hour))
			return err
		}, tx.rollback)
		require.NoError(t, err)
		require.True(t, returned, "the claim waited for the app's open transaction before taking unlimited job %d", u)
		require.Equal(t, []int64{u}, ids(claimed.Jobs))
		require.Zero(t, claimed.Promoted, "j2 is left due")
		require.Equal(t, engine.StateScheduled, state(t, s, j2).State)

		claimed, err = claimDue(at(2*time.Hour + time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{j2}, ids(claimed.Jobs), "the app rolled back: j2 takes c's slot and runs")
	})
}

// Guards docs/concurrency.md's exceptions and docs/fairness.md: an app's
// transaction makes the row of a new concurrency key (or fairness key)
// with its enqueue while two other transactions wait to make the same
// row, then rolls back. On MySQL InnoDB turns both waiters' locks into
// gap locks when the row vanishes, and each one's insert waits for the
// other's: one of them gets a deadlock (1213), at READ COMMITTED too, as
// with a coalesce key's row. That error is one the store calls
// retryable, and the waiter's transaction run again succeeds; a waiter
// that is the store's own transaction (a plain Enqueue) is run again by
// the store, and succeeds. On PostgreSQL no waiter fails.
func TestAnEnqueueTxWaitingOnANewKeyRowThatRollsBackMayGetARetryableDeadlock(t *testing.T) {
	kinds := map[string]func() engine.NewJob{
		"semaphore": func() engine.NewJob { return concJob("acct/new", 1, time.Minute) },
		"fair":      func() engine.NewJob { return fairJob("tenant/new", 0) },
	}
	for _, kind := range []string{"semaphore", "fair"} {
		// app: the app's pool (MySQL at its default REPEATABLE READ);
		// rc: a pool opened as sluice opens its own (READ COMMITTED);
		// own: the store's own transactions.
		for _, waiter := range []string{"app", "rc", "own"} {
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
					again := make([]func() error, 2)
					for i := 0; i < 2; i++ {
						w := s
						begin := func() appTx { return appTx{} }
						switch waiter {
						case "app":
							a := app()
							w, begin = a.s, func() appTx { return a.begin(t) }
						case "rc":
							w = open()
							begin = func() appTx {
								etx, err := w.DB().Begin(ctx)
								require.NoError(t, err)
								return appTx{ex: etx, commit: func() error { return etx.Commit(ctx) }, rollback: func() { _ = etx.Rollback(ctx) }}
							}
						}
						run := func(tx appTx) error {
							if waiter == "own" {
								_, err := w.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{kinds[kind]()})
								return err
							}
							if _, err := w.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{kinds[kind]()}); err != nil {
								tx.rollback()
								return err
							}
							return tx.commit()
						}
						again[i] = func() error { return run(begin()) }
						tx := begin()
						wg.Add(1)
						go func(i int) {
							defer wg.Done()
							errs[i] = run(tx)
						}(i)
					}
					awaitBlockedBy(t, s, first.sid, 2)
					first.rollback()
					wg.Wait()
					failed := 0
					for i, err := range errs {
						if err == nil {
							continue
						}
						failed++
						require.NotEqual(t, "own", waiter, "the store runs its own transaction again: %v", err)
						require.Equal(t, "mysql", s.Dialect().Name(), "waiter %d: %v", i, err)
						require.True(t, s.Dialect().IsRetryable(err), "waiter %d's error is a deadlock the caller may run again: %v", i, err)
						require.NoError(t, again[i](), "waiter %d's transaction, run again", i)
					}
					require.LessOrEqual(t, failed, 1)
					if kind == "semaphore" {
						require.Equal(t, 2, semaphore(t, s, "acct/new").Held+semaphore(t, s, "acct/new").Blocked,
							"both waiters' jobs are there, one holding the slot, one blocked")
					}
				})
			})
		}
	}
}

// Guards the note in docs/concurrency.md and docs/fairness.md: on
// PostgreSQL, an app's transaction at REPEATABLE READ whose snapshot was
// taken before another transaction changed a key's row (a semaphore's, or
// a fairness key's) cannot lock that row: its EnqueueTx of a job of the
// key fails with a serialization failure (40001), which the store calls
// retryable, and the transaction run again succeeds.
func TestAnEnqueueTxAtRepeatableReadOfAKeyChangedSinceItsSnapshotGetsASerializationFailureOnPostgres(t *testing.T) {
	kinds := map[string]func() engine.NewJob{
		"semaphore": func() engine.NewJob { return concJob("acct/1", 2, time.Minute) },
		"fair":      func() engine.NewJob { return fairJob("tenant/1", 0) },
	}
	for _, kind := range []string{"semaphore", "fair"} {
		t.Run(kind, func(t *testing.T) {
			eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
				if s.Dialect().Name() != "postgres" {
					t.Skip("PostgreSQL's REPEATABLE READ")
				}
				ctx := context.Background()
				enqueue(t, s, t0, kinds[kind]())
				a := app()
				run := func(change bool) error {
					tx, err := a.s.DB().Begin(ctx)
					require.NoError(t, err)
					defer func() { _ = tx.Rollback(ctx) }()
					_, err = tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
					require.NoError(t, err)
					_, err = tx.Exec(ctx, "SELECT 1") // the snapshot
					require.NoError(t, err)
					if change {
						enqueue(t, s, t0, kinds[kind]())
					}
					if _, err := a.s.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{kinds[kind]()}); err != nil {
						return err
					}
					return tx.Commit(ctx)
				}
				err := run(true)
				require.Error(t, err)
				require.ErrorContains(t, err, "40001")
				require.True(t, s.Dialect().IsRetryable(err))
				require.NoError(t, run(false), "run again")
			})
		})
	}
}

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

// returnsWhileOpen runs fn in a goroutine while a transaction of the
// app's stays open, and reports whether fn returned within ten seconds
// all the same; it then ends that transaction (release) and returns fn's
// error once fn has returned. (A bounded wait for a lock, a moment long,
// is not waiting for the transaction.)
func returnsWhileOpen(t *testing.T, fn func() error, release func()) (returned bool, err error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = fn()
	}()
	select {
	case <-done:
		returned = true
	case <-time.After(10 * time.Second):
	}
	release()
	<-done
	return returned, err
}
