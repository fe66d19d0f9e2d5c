package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// refuseByTrigger makes the database itself refuse any job whose args
// hold "REFUSE": a trigger, as an app's schema may have.
func refuseByTrigger(t *testing.T, s *engine.Store) {
	ctx := context.Background()
	var stmts []string
	switch s.Dialect().Name() {
	case "postgres":
		stmts = []string{
			`CREATE FUNCTION refuse_marked() RETURNS trigger AS $$ BEGIN IF NEW.args::text LIKE '%REFUSE%' THEN RAISE EXCEPTION 'refused by trigger'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
			`CREATE TRIGGER refuse_marked BEFORE INSERT ON sluice_jobs FOR EACH ROW EXECUTE FUNCTION refuse_marked()`,
		}
	case "mysql":
		stmts = []string{`CREATE TRIGGER refuse_marked BEFORE INSERT ON sluice_jobs FOR EACH ROW BEGIN IF CAST(NEW.args AS CHAR) LIKE '%REFUSE%' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by trigger'; END IF; END`}
	default:
		stmts = []string{`CREATE TRIGGER refuse_marked BEFORE INSERT ON sluice_jobs WHEN NEW.args LIKE '%REFUSE%' BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END`}
	}
	for _, q := range stmts {
		_, err := s.DB().Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

// jobIDs runs q, a query of job ids, on s and returns them.
func jobIDs(t *testing.T, s *engine.Store, q string) []int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// guarantees.md, "Nothing lost": "Every job is checked before anything is
// written, and an error names the job's index; if the database itself
// refuses a job, sluice finds which (in transactions it rolls back) and
// names it." — and "with EnqueueTx it commits or rolls back with your
// transaction". EnqueueMany names the refused job; EnqueueManyTx, in the
// caller's transaction, must name it too (or at least return), not hang.
func TestEnqueueManyTxNamesTheJobTheDatabaseRefuses(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		refuseByTrigger(t, h.store)
		items := []jobs.Item{{Args: email{To: "a"}}, {Args: email{To: "b"}}, {Args: email{To: "REFUSE"}}, {Args: email{To: "d"}}}

		// Outside a transaction of the caller's, the refused job is named.
		_, err := h.client.EnqueueMany(context.Background(), items)
		require.ErrorContains(t, err, "job 2 (email)")

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tx, commit, rollback := callerTx(t, h.store)
		start := time.Now()
		_, err = h.client.EnqueueManyTx(ctx, tx, items)
		took := time.Since(start)
		require.Error(t, err)
		require.NoError(t, ctx.Err(), "EnqueueManyTx waited %s for its context to end: %v", took, err)
		require.ErrorContains(t, err, "job 2 (email)", "took %s", took)
		if _, aborted := h.store.DB().(*postgres.DB); aborted {
			rollback() // PostgreSQL aborts a transaction at its first error
			return
		}
		// Elsewhere the caller's transaction goes on, and the search for
		// the refused job left nothing in it.
		kept, err := h.client.EnqueueTx(ctx, tx, email{To: "kept"})
		require.NoError(t, err)
		commit()
		ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs WHERE kind = 'email'")
		require.Equal(t, []int64{kept.ID}, ids)
	})
}

// concurrency.md: "a transaction of yours that calls EnqueueTx more than
// once on different keys, in an order another transaction reverses" may
// deadlock, and then "yours returns a retryable error: 40P01 on
// PostgreSQL, 1213 on MySQL". Nothing the failed transaction did is left
// behind: the survivor's jobs hold their slots and run.
func TestEnqueueTxDeadlockReturnsTheDatabasesRetryableError(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		name := h.store.Dialect().Name()
		if name == "sqlite" {
			t.Skip("one writer: no second transaction to deadlock with")
		}
		ran := make(chan accountJob, 10)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error { ran <- j.Args; return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, To: 1})))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		tx1, commit1, rollback1 := callerTx(t, h.store)
		tx2, commit2, rollback2 := callerTx(t, h.store)
		_, err := h.client.EnqueueTx(ctx, tx1, accountJob{Account: 1, N: 1})
		require.NoError(t, err)
		_, err = h.client.EnqueueTx(ctx, tx2, accountJob{Account: 2, N: 2})
		require.NoError(t, err)
		// Each side rolls back at once when its enqueue fails, as the
		// docs ask: on PostgreSQL the enqueue's savepoint undid only the
		// enqueue, and the victim's transaction holds the semaphore of
		// its first enqueue, which the other waits for, until it ends.
		done := make(chan error, 1)
		go func() {
			_, err := h.client.EnqueueTx(ctx, tx1, accountJob{Account: 2, N: 1})
			if err != nil {
				rollback1()
			}
			done <- err
		}()
		// tx1 now waits for account 2's semaphore (or will); tx2 takes
		// account 1's: one of them is the deadlock's victim.
		_, err2 := h.client.EnqueueTx(ctx, tx2, accountJob{Account: 1, N: 2})
		if err2 == nil {
			commit2()
		} else {
			rollback2()
		}
		err1 := <-done
		if err1 == nil {
			commit1()
		}
		victim := err1
		if victim == nil {
			victim = err2
		}
		require.Error(t, victim, "one of them deadlocks")
		require.True(t, err1 == nil || err2 == nil, "only one is the victim: %v / %v", err1, err2)
		switch name {
		case "postgres":
			var pe *pgconn.PgError
			require.True(t, errors.As(victim, &pe), "%T %v", victim, victim)
			require.Equal(t, "40P01", pe.Code)
		case "mysql":
			var me *mysqldrv.MySQLError
			require.True(t, errors.As(victim, &me), "%T %v", victim, victim)
			require.EqualValues(t, 1213, me.Number)
		}
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed)
	})
}

// guarantees.md: EnqueueMany enqueues "every job or none ... with
// EnqueueTx it commits or rolls back with your transaction". A batch of
// more jobs than one insert statement carries, one of them refused by the
// database, leaves none of them in the caller's transaction, even should
// the caller go on and commit it. The batch is two jobs more than the
// database's insert statement carries (two statements, the refused job in
// the second), as it always was on PostgreSQL: 5,002 jobs on every
// database made six statements of SQLite's and MySQL's 1,000, and under
// -race most of this test's time.
func TestEnqueueManyTxOfSeveralStatementsLeavesNoneWhenOneIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[email](h.reg))
		refuseByTrigger(t, h.store)
		items := make([]jobs.Item, h.store.Dialect().Capabilities().MaxInsertBatch+2)
		for i := range items {
			items[i] = jobs.Item{Args: email{To: "x"}}
		}
		items[len(items)-1] = jobs.Item{Args: email{To: "REFUSE"}}

		tx, commit, rollback := callerTx(t, h.store)
		committed := false
		defer func() {
			if !committed {
				rollback() // a failed assertion must not leave it open
			}
		}()
		_, err := h.client.EnqueueManyTx(ctx, tx, items)
		require.ErrorContains(t, err, fmt.Sprintf("job %d (email)", len(items)-1))
		kept, err := h.client.EnqueueTx(ctx, tx, email{To: "kept"})
		require.NoError(t, err, "the transaction goes on")
		commit()
		committed = true
		ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs WHERE kind = 'email'")
		require.Equal(t, []int64{kept.ID}, ids, "none of the refused batch's jobs")
	})
}
