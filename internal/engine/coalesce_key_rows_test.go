package engine_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// appTx is a transaction of an app's own, on the app's pool.
type appTx struct {
	ex       engine.Executor
	sid      int64 // the session's id, for testdb.AwaitLockWait (0 on SQLite)
	commit   func() error
	rollback func()
}

// appDB is an app's own pool with a store opened on it: on MySQL a
// database/sql pool whose sessions run at REPEATABLE READ (MySQL's default)
// and store.OpenMySQLDB's store on it; elsewhere another pool of the
// test's database, at the database's default level.
type appDB struct {
	s     *engine.Store
	begin func(t *testing.T) appTx
}

// eachApp runs fn per backend with a migrated store s, a function opening
// other stores (pools) on the database, and a function opening an app's
// pool (appDB).
func eachApp(t *testing.T, fn func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB)) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			u := b.URL(t)
			open := testdb.Opener(t, u)
			s := open()
			_, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			app := func() appDB {
				if b.Name != "mysql" {
					o := open()
					return appDB{s: o, begin: func(t *testing.T) appTx {
						tx, err := o.DB().Begin(ctx)
						require.NoError(t, err)
						var sid int64
						if o.Dialect().Capabilities().RowLocks {
							sid, err = testdb.SessionID(ctx, o, tx)
							require.NoError(t, err)
						}
						return appTx{ex: tx, sid: sid, commit: func() error { return tx.Commit(ctx) }, rollback: func() { _ = tx.Rollback(ctx) }}
					}}
				}
				cfg, err := mysql.Config(u)
				require.NoError(t, err)
				db, err := sql.Open("mysql", cfg.FormatDSN())
				require.NoError(t, err)
				t.Cleanup(func() { _ = db.Close() })
				o, err := mysql.OpenDB(ctx, db)
				require.NoError(t, err)
				return appDB{s: o, begin: func(t *testing.T) appTx {
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(t, err)
					var level string
					require.NoError(t, tx.QueryRowContext(ctx, "SELECT @@tx_isolation").Scan(&level))
					require.Equal(t, "REPEATABLE-READ", level, "the app's sessions run at MySQL's default level")
					var sid int64
					require.NoError(t, tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&sid))
					return appTx{ex: sqldb.Wrap(tx), sid: sid, commit: tx.Commit, rollback: func() { _ = tx.Rollback() }}
				}}
			}
			fn(t, s, open, app)
		})
	}
}

// enqueueWhileHeld runs a's Enqueue of calls in tx, in a goroutine (a
// caller's enqueue at a moment another transaction holds locks it will
// want), and returns once tx waits for a lock or has finished, watching it
// through s's pool. wait waits for it and returns the call's result and
// its error, or the commit's: tx is rolled back when the call fails.
func enqueueWhileHeld(t *testing.T, s *engine.Store, a appDB, tx appTx, calls ...engine.NewJob) (wait func() ([]engine.Enqueued, error)) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var res []engine.Enqueued
	var err error
	go func() {
		defer close(done)
		if res, err = a.s.Enqueue(ctx, tx.ex, engine.At(t0), calls); err != nil {
			tx.rollback()
			return
		}
		err = tx.commit()
	}()
	require.NoError(t, testdb.AwaitLockWait(ctx, s, tx.sid, done))
	return func() ([]engine.Enqueued, error) {
		<-done
		return res, err
	}
}

// hookEx runs before ahead of each statement of ex.
type hookEx struct {
	engine.Executor
	before func(q string)
}

func (h hookEx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	h.before(q)
	return h.Executor.Exec(ctx, q, args...)
}

func (h hookEx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	h.before(q)
	return h.Executor.Query(ctx, q, args...)
}

// discardCall is a coalescing call of key.
func discardCall(key string) engine.NewJob {
	j := job("k", "default", 0)
	j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
	return j
}

// pendingOf returns the ids of the jobs that hold key.
func pendingOf(t *testing.T, s *engine.Store, key string) []int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT id FROM sluice_jobs WHERE coalesce_key = "+placeholder(s, 1)+" ORDER BY id", key)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func placeholder(s *engine.Store, n int) string {
	if s.Dialect().Name() == "postgres" {
		return "$" + string(rune('0'+n))
	}
	return "?"
}

// Two requests of an app, each in a transaction of its own on the app's
// pool, enqueue a coalescing call of a new key each (no pending job
// holds either key, and neither transaction read anything before). When a
// call that found no job looked for it with a locking read of the coalesce
// index, at REPEATABLE READ (MySQL's default, an app pool's) the read
// locked the gap where the key would go; two calls of keys in one gap (the
// end of the index, for keys newer than any) both locked it, then each
// one's insert waited for the other's: InnoDB failed one of the two app
// transactions with 1213. A call now reads its key's row, never the index.
//
// The same when the keys had jobs that ran and were deleted
// (DeleteOnComplete deletes a job as it completes), the newest in the
// table, to which their rows still point, before InnoDB purges them: each
// call's locking read of its deleted job finds its delete-marked record.
// (Once purged, the read locks at REPEATABLE READ the gap where the job
// was, where both inserts go: the case docs/concurrency.md lists as an
// exception on MySQL.)
func TestTwoAppTransactionsCreatingNewKeysNeverDeadlock(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		t.Run(map[bool]string{false: "new keys", true: "keys whose jobs were deleted"}[deleted], func(t *testing.T) {
			twoAppTransactionsCreatingKeys(t, deleted)
		})
	}
}

func twoAppTransactionsCreatingKeys(t *testing.T, deleted bool) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		a, b := app(), app()
		if deleted {
			enqueue(t, s, t0, discardCall("co/a"), discardCall("co/b"))
			pid := register(t, s, t0)
			require.Len(t, claim(t, s, pid, t0, 2).Jobs, 2)
			_, err := s.DB().Exec(ctx, "DELETE FROM sluice_jobs")
			require.NoError(t, err)
		}
		concurrent := s.Dialect().Capabilities().RowLocks
		txA := a.begin(t)
		var errB error
		waitB := func() ([]engine.Enqueued, error) { return nil, nil }
		armed := concurrent
		exA := hookEx{Executor: txA.ex, before: func(q string) {
			if !armed || !strings.Contains(q, "INSERT INTO sluice_jobs") {
				return
			}
			// A looked for its key's job and is about to create it: B
			// does the same now, and A goes on once B waits (or is done).
			armed = false
			waitB = enqueueWhileHeld(t, s, b, b.begin(t), discardCall("co/b"))
		}}
		_, errA := a.s.Enqueue(ctx, exA, engine.At(t0), []engine.NewJob{discardCall("co/a")})
		if errA == nil {
			errA = txA.commit()
		} else {
			txA.rollback()
		}
		_, errB = waitB()
		if !concurrent {
			txB := b.begin(t)
			_, errB = b.s.Enqueue(ctx, txB.ex, engine.At(t0), []engine.NewJob{discardCall("co/b")})
			require.NoError(t, errB)
			errB = txB.commit()
		}
		require.NoError(t, errA, "A's transaction got no deadlock back")
		require.NoError(t, errB, "B's transaction got no deadlock back")
		require.Len(t, pendingOf(t, s, "co/a"), 1)
		require.Len(t, pendingOf(t, s, "co/b"), 1)
	})
}

// The hourly clean-up deletes a key's row while calls of that key, each on
// a pool of its own and in a transaction of its caller's, wait for it
// (they asked for the row after the clean-up locked it). Once it commits,
// the first creates the row anew and creates the key's pending job, and
// the others join that job, one after another: none gets a deadlock back
// (the row's delete-marked record, which they all waited for, is not a
// gap any of them may lock at READ COMMITTED), and the key has one
// pending job.
func TestCallsWaitingForAKeyRowTheCleanUpDeletesShareOneJob(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		first := enqueue(t, s, t0, discardCall("co/a"), discardCall("co/b"))
		pid := register(t, s, t0)
		require.Equal(t, first[:1], ids(claim(t, s, pid, t0, 1).Jobs), "co/a's job is claimed: the key has no pending job")
		if !s.Dialect().Capabilities().RowLocks {
			n, err := s.ClearCoalesceKeys(ctx, 10, 0)
			require.NoError(t, err)
			require.Equal(t, 1, n, "co/a's row goes (its job was claimed); co/b's job is pending")
			again := enqueue(t, s, t0, discardCall("co/a"), discardCall("co/a"))
			require.Equal(t, again[0], again[1])
			require.Equal(t, []int64{again[0]}, pendingOf(t, s, "co/a"))
			return
		}
		const callers = 3
		pools := make([]*engine.Store, callers)
		for i := range pools {
			pools[i] = open()
		}
		rh, rec := testdb.Record(s)
		waits := make([]func() error, callers)
		res := make([][]engine.Enqueued, callers)
		armed := true
		rec.Before = func(q string) {
			if !armed || !strings.Contains(q, "DELETE FROM sluice_coalesce_keys") {
				return
			}
			armed = false
			// The clean-up holds co/a's and co/b's rows and is about to
			// delete them: the calls come now and wait for co/a's.
			for i, p := range pools {
				waits[i] = testdb.CallWhileHeld(t, s, p, func(tx engine.Tx) (err error) {
					res[i], err = p.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{discardCall("co/a")})
					return err
				})
			}
		}
		n, err := rh.ClearCoalesceKeys(ctx, 10, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n, "co/a's row goes (its job was claimed); co/b's job is pending")
		require.False(t, armed)
		got := map[int64]bool{}
		for i := range pools {
			require.NoError(t, waits[i](), "caller %d", i)
			got[res[i][0].ID] = true
		}
		require.Len(t, got, 1, "every call is in one job")
		require.Len(t, pendingOf(t, s, "co/a"), 1)
	})
}

// A transaction of the app's at REPEATABLE READ reads first (its snapshot
// then shows no job of the key, or a job since claimed), then another
// process creates the key's pending job (or claims it and a later call
// creates the next): the app's call joins the key's pending job as it is
// now, and the key never has two pending jobs.
func TestAnAppTransactionWithAnOldSnapshotJoinsTheLatestPendingJob(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		a := app()
		pid := register(t, s, t0)
		// begin begins the app's transaction and reads, then does what
		// another process does after that read (before the transaction,
		// on SQLite: one writer at a time).
		begin := func(other func()) appTx {
			if !s.Dialect().Capabilities().RowLocks {
				other()
				return a.begin(t)
			}
			tx := a.begin(t)
			rows, err := tx.ex.Query(ctx, "SELECT count(*) FROM sluice_jobs")
			require.NoError(t, err)
			for rows.Next() {
			}
			rows.Close()
			other()
			return tx
		}

		// No job in the snapshot; one created since.
		var p int64
		tx := begin(func() { p = enqueue(t, s, t0, discardCall("co/a"))[0] })
		res, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{discardCall("co/a")})
		require.NoError(t, err)
		require.NoError(t, tx.commit())
		require.Equal(t, engine.Enqueued{ID: p, Joined: true, State: engine.StateReady}, res[0])
		require.Equal(t, []int64{p}, pendingOf(t, s, "co/a"))

		// The snapshot's job was claimed since, and a later call made the
		// next.
		var next int64
		tx = begin(func() {
			require.Equal(t, []int64{p}, ids(claim(t, s, pid, t0, 1).Jobs))
			next = enqueue(t, s, t0, discardCall("co/a"))[0]
		})
		res, err = a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{discardCall("co/a"), discardCall("co/a")})
		require.NoError(t, err)
		require.NoError(t, tx.commit())
		require.Equal(t, next, res[0].ID)
		require.Equal(t, next, res[1].ID)
		require.Equal(t, []int64{next}, pendingOf(t, s, "co/a"))

		// The snapshot's job was claimed since, and no job holds the key.
		tx = begin(func() { require.Equal(t, []int64{next}, ids(claim(t, s, pid, t0, 1).Jobs)) })
		res, err = a.s.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{discardCall("co/a")})
		require.NoError(t, err)
		require.NoError(t, tx.commit())
		require.False(t, res[0].Joined)
		require.Equal(t, []int64{res[0].ID}, pendingOf(t, s, "co/a"))
	})
}

// Reverting 020 with coalescing jobs in place (pending ones, released
// ones, collected calls) and applying it again keeps them: the calls of
// the keys still join their jobs. Where two jobs hold one key (a process
// of the version before 020 made them during a deploy), reverting fails
// with an error that names the key, and leaves 020 applied.
func TestRevertingAndReapplying020KeepsCoalescing(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		collect := func(key string) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 3}}
			return j
		}
		got := enqueue(t, s, t0, collect("co/a"), collect("co/a"), collect("co/a"), collect("co/a"), collect("co/b"))
		require.Equal(t, got[0], got[2])
		require.NotEqual(t, got[2], got[3], "a full job released its key")
		got = got[1:]
		ms, err := s.MigrateDown(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ms, 1)
		require.Equal(t, 20, ms[0].Version)
		// The version before 020 would run here; the store of this one
		// runs only on its schema.
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		again := enqueue(t, s, t0, collect("co/a"), collect("co/b"))
		require.Equal(t, []int64{got[2], got[3]}, again)
		require.Equal(t, []int64{got[2]}, pendingOf(t, s, "co/a"))

		// Two jobs hold co/c, as an older process's racing calls leave.
		two := enqueue(t, s, t0, collect("co/c"), collect("co/d"))
		_, err = s.DB().Exec(ctx, "UPDATE sluice_jobs SET coalesce_key = 'co/c' WHERE id = "+placeholder(s, 1), two[1])
		if s.Dialect().Name() != "mysql" {
			// Elsewhere the index is unique: the database refuses a
			// second job of the key.
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		_, err = open().MigrateDown(ctx, 1)
		require.Error(t, err)
		require.Contains(t, err.Error(), "co/c", "the error names the key two jobs hold")
		require.Contains(t, err.Error(), "020")
		st, err := s.MigrationStatus(ctx)
		require.NoError(t, err)
		require.True(t, st[len(st)-1].Applied, "020 is still applied: %+v", st[len(st)-1])
		// The calls of the key still work, and join the older job.
		res := enqueue(t, s, t0, collect("co/c"))
		require.Equal(t, two[0], res[0])
	})
}

// Callers on pools of their own, each in a transaction of its own at READ
// COMMITTED (which sluice cannot run again), enqueue several calls at once:
// of several keys, in varying orders, with a key repeated, collecting up
// to MaxCalls (a full job releases its key in the middle of an enqueue,
// whose next call of the key starts a new job), debounced. No caller gets
// an error back; every call is in exactly one job; no job holds more than
// MaxCalls; each key ends with exactly one pending job, which holds the
// calls the full ones did not.
func TestConcurrentMultiKeyCollectingEnqueuesLoseNothing(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		const maxCalls = 3
		keys := []string{"co/a", "co/b", "co/c"}
		call := func(key string) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect,
				MaxCalls: maxCalls, Debounce: time.Second}}
			return j
		}
		const callers, rounds = 4, 12
		var wg sync.WaitGroup
		var mu sync.Mutex
		perJob := map[int64]int{}
		perKey := map[string]int{}
		jobKey := map[int64]string{}
		errs := make([]error, callers)
		for c := 0; c < callers; c++ {
			p := open()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					// Keys in an order of this caller's and round's, one
					// of them twice.
					var batch []string
					for k := range keys {
						batch = append(batch, keys[(k+c+r)%len(keys)])
					}
					batch = append(batch, batch[r%len(batch)])
					if (c+r)%2 == 1 {
						slices.Reverse(batch)
					}
					jobs := make([]engine.NewJob, len(batch))
					for i, k := range batch {
						jobs[i] = call(k)
					}
					tx, err := p.DB().Begin(ctx)
					if err != nil {
						errs[c] = err
						return
					}
					res, err := p.Enqueue(ctx, tx, engine.At(t0), jobs)
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						_ = tx.Rollback(ctx)
					}
					if err != nil {
						errs[c] = fmt.Errorf("round %d (%v): %w", r, batch, err)
						return
					}
					mu.Lock()
					for i, e := range res {
						perJob[e.ID]++
						perKey[batch[i]]++
						if k, ok := jobKey[e.ID]; ok && k != batch[i] {
							errs[c] = fmt.Errorf("job %d holds calls of %s and %s", e.ID, k, batch[i])
						}
						jobKey[e.ID] = batch[i]
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for c, err := range errs {
			require.NoError(t, err, "caller %d", c)
		}
		for _, k := range keys {
			pending := pendingOf(t, s, k)
			require.Len(t, pending, 1, "key %s has exactly one pending job", k)
			total, full := 0, 0
			for id, n := range perJob {
				if jobKey[id] != k {
					continue
				}
				require.LessOrEqual(t, n, maxCalls, "job %d of %s", id, k)
				require.Equal(t, n, state(t, s, id).Calls, "job %d holds every call enqueued into it", id)
				total += n
				if id != pending[0] {
					require.Equal(t, maxCalls, n, "a job no longer pending is full")
					full++
				}
			}
			require.Equal(t, perKey[k], total)
			require.Equal(t, perKey[k]-full*maxCalls, perJob[pending[0]])
		}
	})
}

// A call in a caller's transaction finds no pending job of its key and
// goes to create one; each time, another process's call creates the key's
// job first (and commits), and a claim takes that job before the call
// looks again. Calls of a busy key (Collect with a small MaxCalls, a
// worker claiming as fast) race this way. coalesce.md promises that the
// call "that loses the race to create it joins the winner's"; on
// PostgreSQL, after five lost rounds the call failed instead ("the pending
// job kept changing under this call"). Now every call holds its key's row,
// so the other call waits for it and joins its job.
func TestACallThatKeepsLosingTheRaceToCreateItsJobStillLands(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		concurrent := s.Dialect().Capabilities().RowLocks
		other := open()
		caller := open()
		tx, err := caller.DB().Begin(ctx)
		require.NoError(t, err)
		var others []func() error
		looks, inserts := 0, 0
		ex := hookEx{Executor: tx, before: func(q string) {
			if !concurrent {
				return
			}
			switch {
			case strings.Contains(q, "INSERT INTO sluice_jobs") && strings.Contains(q, "coalesce_key"):
				// Another process's call of the key comes first.
				inserts++
				if inserts > 10 {
					return
				}
				others = append(others, testdb.CallWhileHeld(t, s, other, func(otx engine.Tx) error {
					_, err := other.Enqueue(ctx, otx, engine.At(t0), []engine.NewJob{discardCall("co/a")})
					return err
				}))
			case strings.Contains(q, "WHERE coalesce_key = ") && strings.Contains(q, "FOR UPDATE"):
				// And a worker claims it before the call looks again.
				looks++
				if looks > 1 && inserts <= 10 {
					claim(t, s, pid, t0, 10)
				}
			}
		}}
		res, err := caller.Enqueue(ctx, ex, engine.At(t0), []engine.NewJob{discardCall("co/a")})
		if err != nil {
			_ = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		otherErrs := make([]error, len(others))
		for i, wait := range others {
			otherErrs[i] = wait()
		}
		require.NoError(t, err, "the call joins or creates the key's pending job")
		for _, e := range otherErrs {
			require.NoError(t, e)
		}
		pending := pendingOf(t, s, "co/a")
		require.Len(t, pending, 1)
		if !res[0].Joined {
			require.Equal(t, pending[0], res[0].ID)
		}
	})
}

// An app's transaction at REPEATABLE READ read before its key got a
// pending job, and calls just as a claim takes that job. The call reads
// the job its key's row points to with the row's lock (as last committed,
// whatever its snapshot), locks it through the primary key and waits for
// the claim, which waits for nothing the call holds: neither gets a
// deadlock back, and the key never gets a second pending job. (When the
// call looked for the job through the coalesce index, this was the one
// case concurrency.md listed as an exception on MySQL.)
func TestAnOldSnapshotCallRacingAClaimNeverDeadlocks(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		a := app()
		pid := register(t, s, t0)
		tx := a.begin(t)
		rows, err := tx.ex.Query(ctx, "SELECT count(*) FROM sluice_jobs")
		require.NoError(t, err)
		for rows.Next() {
		}
		rows.Close()
		p := enqueue(t, s, t0, discardCall("co/a"))[0]

		rh, rec := testdb.Record(s)
		wait := func() ([]engine.Enqueued, error) { return nil, nil }
		armed := true
		rec.Before = func(q string) {
			if !armed || !strings.Contains(q, "SET state = 'running'") {
				return
			}
			armed = false
			wait = enqueueWhileHeld(t, s, a, tx, discardCall("co/a"))
		}
		claimed := claim(t, rh, pid, t0, 1).Jobs
		res, enqErr := wait()
		require.False(t, armed)
		require.NoError(t, enqErr, "the app's transaction gets no deadlock back")
		marks := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "SET state = 'running'") {
				marks++
			}
		}
		require.Equal(t, 1, marks, "the claim ran once: no deadlock failed it")
		require.Equal(t, []int64{p}, ids(claimed))
		require.False(t, res[0].Joined, "the call joined a job no longer pending")
		require.Equal(t, []int64{res[0].ID}, pendingOf(t, s, "co/a"))
	})
}

// An app's transaction at REPEATABLE READ (MySQL's default, the app's own
// pool) enqueues, in one call, a call of a new key (co/m) and one of a key
// whose pending job Z (co/z, the next key in the index) a worker is
// claiming. When calls looked for their job through the coalesce index
// on MySQL, co/m's call, finding none, locked at REPEATABLE READ the next
// entry, Z's (a next-key lock), then co/z's call waited for Z, which the
// claim held, while the claim, releasing Z's key, waited for Z's entry:
// InnoDB failed one of the two, the claim (run again) or the app's
// transaction. Calls now find their jobs through their keys' rows.
func TestAnAppCallOfANewKeyNeverDeadlocksWithAClaimOfTheNextKeysJob(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		a := app()
		pid := register(t, s, t0)
		z := enqueue(t, s, t0, discardCall("co/z"))[0]
		calls := []engine.NewJob{discardCall("co/m"), discardCall("co/z")}
		if !s.Dialect().Capabilities().RowLocks {
			require.Equal(t, []int64{z}, ids(claim(t, s, pid, t0, 1).Jobs))
			tx := a.begin(t)
			_, err := a.s.Enqueue(ctx, tx.ex, engine.At(t0), calls)
			require.NoError(t, err)
			require.NoError(t, tx.commit())
			return
		}
		rh, rec := testdb.Record(s)
		wait := func() ([]engine.Enqueued, error) { return nil, nil }
		armed := true
		rec.Before = func(q string) {
			if !armed || !strings.Contains(q, "SET state = 'running'") {
				return
			}
			// The claim holds Z and is about to release its key.
			armed = false
			wait = enqueueWhileHeld(t, s, a, a.begin(t), calls...)
		}
		claimed := claim(t, rh, pid, t0, 1).Jobs
		res, enqErr := wait()
		require.False(t, armed)
		require.NoError(t, enqErr, "the app's transaction gets no deadlock back")
		marks := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "SET state = 'running'") {
				marks++
			}
		}
		require.Equal(t, 1, marks, "the claim ran once: no deadlock failed it")
		require.Equal(t, []int64{z}, ids(claimed))
		require.Len(t, res, 2)
		require.False(t, res[1].Joined, "co/z's call joined a job no longer pending")
		require.Len(t, pendingOf(t, s, "co/m"), 1)
		require.Len(t, pendingOf(t, s, "co/z"), 1)
	})
}
