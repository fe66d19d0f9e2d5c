package jobs_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// sessionOf returns the database session id of a caller's transaction,
// for testdb.AwaitLockWait.
func sessionOf(ctx context.Context, t *testing.T, tx any) int64 {
	var id int64
	switch tx := tx.(type) {
	case pgx.Tx:
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&id))
	case *sql.Tx:
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	}
	return id
}

// keyRowCaller is one caller of a key-row race: a client and a way to
// begin a transaction of its own on its own pool.
type keyRowCaller struct {
	client *jobs.Client
	begin  func() (tx any, commit, rollback func() error)
}

// keyRowRace is a fresh database with a Collect kind, and callers on pools
// of their own: the app's own (pool "app": MySQL at its default
// REPEATABLE READ) or sluice's store's (pool "store": READ COMMITTED on
// MySQL).
type keyRowRace struct {
	t      *testing.T
	b      testdb.Backend
	s      *engine.Store
	client *jobs.Client
	reg    *jobs.Registry
	caller func() keyRowCaller
}

func newKeyRowRace(t *testing.T, b testdb.Backend, pool string) *keyRowRace {
	ctx := context.Background()
	url := b.URL(t)
	open := testdb.Opener(t, url)
	s := open()
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.RegisterCalls(reg, func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { return nil },
		jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, OnConflict: coalesce.Collect})))
	clk := clock.NewFake(t0)
	r := &keyRowRace{t: t, b: b, s: s, reg: reg, client: jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})}
	r.caller = func() keyRowCaller {
		if pool == "app" {
			p := openAppTxPool(t, b.Name, url, reg, clk, false)
			return keyRowCaller{p.client, func() (any, func() error, func() error) {
				tx, c, rb, err := p.begin(ctx)
				require.NoError(t, err)
				return tx, c, rb
			}}
		}
		st := open()
		return keyRowCaller{jobs.NewClient(testdb.Public(st), reg, jobs.ClientConfig{Clock: clk}), func() (any, func() error, func() error) {
			tx, c, rb := callerTx(t, st)
			return tx, func() error { c(); return nil }, func() error { rb(); return nil }
		}}
	}
	return r
}

// twoWaiters starts two callers that each enqueue a call of shop 1 in a
// transaction of their own and commit, waits until both wait for a lock
// (on SQLite, until both started: they wait for the one writer), runs
// release, and returns each caller's error.
func (r *keyRowRace) twoWaiters(release func() error) [2]error {
	t, ctx := r.t, context.Background()
	var errs [2]error
	sessions := make([]int64, 2)
	started := make(chan struct{}, 2)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		c := r.caller()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if r.b.Name == "sqlite" {
				started <- struct{}{} // it waits at its start, for the one writer
			}
			tx, commit, rollback := c.begin()
			if r.b.Name != "sqlite" {
				sessions[i] = sessionOf(ctx, t, tx)
				started <- struct{}{}
			}
			if _, errs[i] = c.client.EnqueueTx(ctx, tx, pushSKU{Shop: 1, SKU: fmt.Sprint(i)}); errs[i] != nil {
				_ = rollback()
				return
			}
			errs[i] = commit()
		}(i)
	}
	go func() { wg.Wait(); close(done) }()
	<-started
	<-started
	if r.b.Name != "sqlite" {
		for _, id := range sessions {
			require.NoError(t, testdb.AwaitLockWait(ctx, r.s, id, done))
		}
	}
	require.NoError(t, release())
	<-done
	return errs
}

// oneJobOfTheCommittedCalls checks the outcome of twoWaiters whose key
// row vanished under them: at least one waiter's transaction committed;
// on MySQL the other may have got a deadlock (1213), which its caller
// runs again (docs/concurrency.md lists it), and on the other databases
// both commit; either way the key has one pending job holding exactly the
// committed calls.
func (r *keyRowRace) oneJobOfTheCommittedCalls(errs [2]error) {
	t := r.t
	committed := 0
	for i, err := range errs {
		if err == nil {
			committed++
			continue
		}
		require.Equal(t, "mysql", r.b.Name, "waiter %d: %v", i, err)
		require.True(t, r.s.Dialect().IsRetryable(err), "waiter %d: only a deadlock, to run again: %v", i, err)
	}
	require.Positive(t, committed, "at least one waiter's transaction commits")
	var calls int
	rows, err := r.s.DB().Query(context.Background(), "SELECT calls FROM sluice_jobs WHERE coalesce_key IS NOT NULL AND state <> 'completed'")
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		require.NoError(t, rows.Scan(&calls))
		n++
	}
	rows.Close()
	require.Equal(t, 1, n, "the key has one pending job")
	require.Equal(t, committed, calls, "holding the committed calls")
}

// A caller's transaction creates a key's row (and job), two other
// callers' transactions wait on that row, and the first rolls back: the
// row vanishes under both waiters. On PostgreSQL and SQLite both go on.
// On MySQL InnoDB turns both waiters' locks on the rolled-back row into
// gap locks, and each one's insert of the row then waits for the other's:
// one gets a deadlock (1213), the exception docs/concurrency.md lists,
// which its caller runs again. Either way nothing is lost or doubled: the
// key ends with one pending job holding exactly the calls whose
// transactions committed.
func TestTwoCallsWaitingOnAKeyRowThatRollsBack(t *testing.T) {
	for _, pool := range []string{"app", "store"} {
		for _, b := range testdb.Backends(t) {
			t.Run(pool+"/"+b.Name, func(t *testing.T) {
				r := newKeyRowRace(t, b, pool)
				first := r.caller()
				tx, _, rollback := first.begin()
				_, err := first.client.EnqueueTx(context.Background(), tx, pushSKU{Shop: 1, SKU: "rolled back"})
				require.NoError(t, err)
				r.oneJobOfTheCommittedCalls(r.twoWaiters(rollback))
			})
		}
	}
}

// The same with the dispatcher's clean-up of idle key rows
// (ClearCoalesceKeys, docs/coalesce.md: "the next call of such a key
// creates its row again"; coalesce.sql: "A row being deleted makes the
// insert wait, then insert it anew"): a transaction that does what one of
// its batches does — locks the row of a key whose job was claimed, and
// deletes it — while two callers' transactions wait on the row, then
// commits. Both go on on PostgreSQL and SQLite. On MySQL the row vanishes
// under both waiters as after a rollback, and when InnoDB has not purged
// it yet (a loaded machine: CI saw it once) one of them can get a
// deadlock to run again, as in TestTwoCallsWaitingOnAKeyRowThatRollsBack.
func TestTwoCallsWaitingOnAKeyRowTheCleanUpDeletes(t *testing.T) {
	for _, pool := range []string{"app", "store"} {
		for _, b := range testdb.Backends(t) {
			t.Run(pool+"/"+b.Name, func(t *testing.T) {
				ctx := context.Background()
				r := newKeyRowRace(t, b, pool)
				_, err := r.client.Enqueue(ctx, pushSKU{Shop: 1, SKU: "ran"})
				require.NoError(t, err)
				w, err := jobs.NewWorker(testdb.Public(r.s), r.reg, jobs.WorkerConfig{Logger: quiet(), Clock: clock.NewFake(t0)})
				require.NoError(t, err)
				res, err := w.Drain(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, res.Completed, "the job released its key")
				cleaner, err := r.s.DB().Begin(ctx)
				require.NoError(t, err)
				lock := " FOR UPDATE"
				if b.Name == "sqlite" {
					lock = "" // the transaction holds the one write lock
				}
				rows, err := cleaner.Query(ctx, "SELECT name FROM sluice_coalesce_keys"+lock)
				require.NoError(t, err)
				var names []string
				for rows.Next() {
					var n string
					require.NoError(t, rows.Scan(&n))
					names = append(names, n)
				}
				require.NoError(t, rows.Err())
				rows.Close()
				require.Len(t, names, 1)
				_, err = cleaner.Exec(ctx, "DELETE FROM sluice_coalesce_keys WHERE name = '"+names[0]+"'")
				require.NoError(t, err)
				r.oneJobOfTheCommittedCalls(r.twoWaiters(func() error { return cleaner.Commit(ctx) }))
			})
		}
	}
}

// A call locks its own key's row, so calls of other keys do not wait for
// it. On MySQL/MariaDB a locking read of several rows (WHERE name IN (...)
// FOR UPDATE) scanned sluice_coalesce_keys when the table was small, and
// locked, or waited for, the rows of keys it did not name; each key's row
// is now read on its own, through the primary key. Here transaction T2
// holds key 2's row (a call of shop 2); T1 enqueues calls of shops 1 and
// 3 to 7 in one EnqueueManyTx, which locks their rows, then waits for row
// 2 in its read (MariaDB scans the primary key for an IN list that long
// against 8 rows); T2 then calls shop 3, in key order, and waits for T1:
// that was a deadlock, and one of them got 1213 back in its own
// transaction (plain Enqueue retries such a deadlock; EnqueueTx cannot).
func TestCallsOfOtherKeysDoNotDeadlock(t *testing.T) {
	for _, pool := range []string{"app", "store"} {
		for _, b := range testdb.Backends(t) {
			t.Run(pool+"/"+b.Name, func(t *testing.T) {
				if b.Name == "sqlite" {
					t.Log("SQLite has one writer: the transactions cannot interleave")
				}
				ctx := context.Background()
				r := newKeyRowRace(t, b, pool)
				// The key rows exist already, as in any busy queue.
				for shop := 1; shop <= 8; shop++ {
					_, err := r.client.Enqueue(ctx, pushSKU{Shop: shop, SKU: "before"})
					require.NoError(t, err)
				}
				t2c, t1c := r.caller(), r.caller()
				var t1Items []jobs.Item
				for _, shop := range []int{1, 3, 4, 5, 6, 7} {
					t1Items = append(t1Items, jobs.Item{Args: pushSKU{Shop: shop, SKU: "t1"}})
				}
				var t2err, t1err error
				t2, commit2, rollback2 := t2c.begin()
				_, t2err = t2c.client.EnqueueTx(ctx, t2, pushSKU{Shop: 2, SKU: "t2"})
				require.NoError(t, t2err)
				if b.Name == "sqlite" {
					require.NoError(t, commit2())
					t1, commit1, _ := t1c.begin()
					_, t1err = t1c.client.EnqueueManyTx(ctx, t1, t1Items)
					require.NoError(t, t1err)
					require.NoError(t, commit1())
					return
				}
				done := make(chan struct{})
				t1, commit1, rollback1 := t1c.begin()
				t1session := sessionOf(ctx, t, t1)
				go func() {
					defer close(done)
					_, t1err = t1c.client.EnqueueManyTx(ctx, t1, t1Items)
					if t1err != nil {
						_ = rollback1()
						return
					}
					t1err = commit1()
				}()
				require.NoError(t, testdb.AwaitLockWait(ctx, r.s, t1session, done))
				select {
				case <-done:
				default:
					t.Log("T1, whose calls are of shops 1 and 3 to 7, waits for T2, which holds shop 2")
				}
				_, t2err = t2c.client.EnqueueTx(ctx, t2, pushSKU{Shop: 3, SKU: "t2"})
				if t2err != nil {
					_ = rollback2()
				} else {
					t2err = commit2()
				}
				<-done
				require.NoError(t, t2err, "T2's transaction")
				require.NoError(t, t1err, "T1's transaction")
			})
		}
	}
}
