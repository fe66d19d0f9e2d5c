package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A pending job that an enqueuer of the version before 020 made has no key
// row (or its key's row still points to an older job, since released), as
// docs/coalesce.md says. On PostgreSQL and SQLite a later call's insert
// meets it in the unique index and joins it. On MySQL, whose index is no
// longer unique, the later call makes a second pending job of the key
// (each runs once) and points the row to it, and the calls after join
// that one: one extra job per such key, no more. (The database is left
// here as such a process leaves it.)
func TestACallBesideAPendingJobNoKeyRowPointsTo(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store) {
		ctx := context.Background()
		p := enqueue(t, s, t0, discardCall("co/old"))[0]
		// As an enqueuer of the version before 020 leaves it: a pending
		// job of the key, and no row pointing to it.
		_, err := s.DB().Exec(ctx, "DELETE FROM sluice_coalesce_keys")
		require.NoError(t, err)

		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{discardCall("co/old")})
		require.NoError(t, err)
		if s.Dialect().Name() == "mysql" {
			require.False(t, res[0].Joined)
			require.Equal(t, []int64{p, res[0].ID}, pendingOf(t, s, "co/old"), "a second pending job, as documented")
			again, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{discardCall("co/old")})
			require.NoError(t, err)
			require.Equal(t, engine.Enqueued{ID: res[0].ID, Joined: true, State: engine.StateReady}, again[0], "the next call joins the one its row points to")
			return
		}
		require.Equal(t, []int64{p}, pendingOf(t, s, "co/old"), "the key has one pending job")
		require.Equal(t, engine.Enqueued{ID: p, Joined: true, State: engine.StateReady}, res[0])

		// Same when the row still points to an older job of the key,
		// since released (claimed).
		pid := register(t, s, t0)
		require.Equal(t, []int64{p}, ids(claim(t, s, pid, t0, 1).Jobs))
		q := enqueue(t, s, t0, discardCall("co/old"))[0]
		_, err = s.DB().Exec(ctx, "UPDATE sluice_coalesce_keys SET job_id = "+placeholder(s, 1), p)
		require.NoError(t, err)
		res, err = s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{discardCall("co/old")})
		require.NoError(t, err)
		require.Equal(t, []int64{q}, pendingOf(t, s, "co/old"), "the key has one pending job")
		require.True(t, res[0].Joined)
	})
}

// A transaction at REPEATABLE READ takes its snapshot (a read), then
// another process creates the key's pending job, then the transaction's
// call of the key comes. On MySQL the call reads the key's row with a lock,
// as last committed, and joins the job. On PostgreSQL a row another
// transaction changed after the snapshot cannot be locked at that level:
// the call fails with a serialization error (40001), which the caller runs
// again, as docs/coalesce.md says.
func TestARepeatableReadCallAfterItsKeyGotAJob(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		ctx := context.Background()
		var tx appTx
		var as *engine.Store
		switch s.Dialect().Name() {
		case "postgres":
			as = open()
			ptx, err := as.DB().Begin(ctx)
			require.NoError(t, err)
			_, err = ptx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
			require.NoError(t, err)
			tx = appTx{ex: ptx, commit: func() error { return ptx.Commit(ctx) }, rollback: func() { _ = ptx.Rollback(ctx) }}
		case "mysql":
			a := app()
			as, tx = a.s, a.begin(t)
		default:
			// One writer at a time: the other process's enqueue comes
			// first.
			p := enqueue(t, s, t0, discardCall("co/rr"))[0]
			res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{discardCall("co/rr")})
			require.NoError(t, err)
			require.Equal(t, p, res[0].ID)
			return
		}
		defer tx.rollback()
		rows, err := tx.ex.Query(ctx, "SELECT count(*) FROM sluice_jobs")
		require.NoError(t, err)
		for rows.Next() {
		}
		rows.Close()

		p := enqueue(t, s, t0, discardCall("co/rr"))[0]
		res, err := as.Enqueue(ctx, tx.ex, engine.At(t0), []engine.NewJob{discardCall("co/rr")})
		if s.Dialect().Name() == "postgres" {
			require.Error(t, err)
			require.True(t, s.Dialect().IsRetryable(err), "a serialization failure, to run again: %v", err)
			return
		}
		require.NoError(t, err, "the call finds the key's job as it is now")
		require.NoError(t, tx.commit())
		require.Equal(t, engine.Enqueued{ID: p, Joined: true, State: engine.StateReady}, res[0])
		require.Equal(t, []int64{p}, pendingOf(t, s, "co/rr"))
	})
}

// A transaction holds the (released) job a key row points to, as a
// completion holds a running job: the clean-up deletes the row without
// waiting for it. (On MySQL a DELETE's subquery locked the jobs it read,
// even at READ COMMITTED; the clean-up now reads them without a lock.)
func TestTheCoalesceKeyCleanUpWaitsForNoJob(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		p := enqueue(t, s, t0, discardCall("co/w"))[0]
		pid := register(t, s, t0)
		require.Equal(t, []int64{p}, ids(claim(t, s, pid, t0, 1).Jobs))
		if !s.Dialect().Capabilities().RowLocks {
			n, err := s.ClearCoalesceKeys(ctx, 10, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			return
		}
		other := open()
		tx, err := other.DB().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, "SELECT id FROM sluice_jobs WHERE id = "+placeholder(s, 1)+" FOR UPDATE", p)
		require.NoError(t, err)
		for rows.Next() {
		}
		rows.Close()

		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := s.ClearCoalesceKeys(cctx, 10, time.Millisecond)
		require.NoError(t, err, "the clean-up waited for the job a transaction holds")
		require.Equal(t, 1, n)
	})
}

// One enqueue: a call creates the key's job, the next fills it
// (MaxCalls 2, which releases the key), the third starts the next job; the
// enqueue's transaction then rolls back. Nothing of it stays: the next
// calls make one job and then join it, and the key never has two pending
// jobs.
func TestARolledBackEnqueueLeavesNoPointer(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store) {
		ctx := context.Background()
		collect := func() engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: "co/rb", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 2}}
			return j
		}
		tx, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		res, err := s.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{collect(), collect(), collect()})
		require.NoError(t, err)
		require.Equal(t, res[0].ID, res[1].ID)
		require.NotEqual(t, res[1].ID, res[2].ID)
		require.NoError(t, tx.Rollback(ctx))
		require.Empty(t, pendingOf(t, s, "co/rb"))

		got := enqueue(t, s, t0, collect())
		require.Equal(t, got, pendingOf(t, s, "co/rb"))
		again := enqueue(t, s, t0, collect(), collect())
		require.Equal(t, got[0], again[0], "the call joins the job the last made")
		require.Equal(t, []int64{again[1]}, pendingOf(t, s, "co/rb"))
	})
}

// What one coalescing call costs, in statements, as docs/coalesce.md
// gives it: the key rows' lock and read (one round trip on PostgreSQL,
// which sends them together), then the lock of the job the row points to
// (when it points to one), then the join or the insert, then, after an
// insert, the row's new pointer. Before migration 020 a call ran two: the
// locking read of its pending job, then the join or the insert.
func TestACoalescingCallCostsWhatTheDocsSay(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store) {
		ctx := context.Background()
		rs, r := testdb.Record(s)
		enqueue(t, rs, t0, job("k", "default", 0)) // the schema check, once
		statements := func() int {
			r.Take()
			_, err := rs.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{discardCall("co/cost")})
			require.NoError(t, err)
			return len(r.Take())
		}
		require.Equal(t, 4, statements(), "a call that creates a new key's job: the key rows (2), the insert, the pointer")
		require.Equal(t, 4, statements(), "a call that joins: the key rows (2), the job's lock, the join")
		pid := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 10).Jobs, 2)
		require.Equal(t, 5, statements(), "a call that creates its key's next job: the key rows (2), the released job's read, the insert, the pointer")
	})
}
