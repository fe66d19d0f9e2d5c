package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/internal/engine"
)

// ownTx is a transaction the store began on a connection of its pool. It
// sends BEGIN with its first statements and, through PipelineCommit,
// COMMIT with its last ones, so that a claim or a finish costs two round
// trips fewer than BEGIN, the statements and COMMIT each in their own,
// and holds its row locks one round trip less. A connection left inside a
// transaction (a failed rollback) is not reused: the pool destroys a
// connection released in that state.
type ownTx struct {
	conn *pgxpool.Conn
	// begin is the statement that begins it (beginSQL or beginReadSQL).
	begin string
	begun bool
	// done is set once the transaction has committed or rolled back and
	// the connection has gone back to the pool.
	done bool
	// readOnly is set once the server refused a write of the
	// transaction as read-only (readOnlySession): release closes the
	// connection instead of giving it back.
	readOnly bool
}

var (
	_ engine.Pipeliner       = (*ownTx)(nil)
	_ engine.CommitPipeliner = (*ownTx)(nil)
)

const (
	// beginSQL begins the store's read-write transactions at READ
	// COMMITTED, whatever default_transaction_isolation the role, the
	// database or the server sets: claims that skip locked rows, budget
	// and semaphore updates and promotions are written for it (each
	// statement sees what committed before it, and a row another
	// transaction changed is waited for and read again). At REPEATABLE
	// READ or SERIALIZABLE concurrent workers would fail each other with
	// serialization failures (40001) and migrators waiting for the
	// migration lock would miss what the one before them made.
	beginSQL = "begin isolation level read committed"
	// beginReadSQL begins a transaction whose statements all read the
	// snapshot its first one takes, and which writes nothing: it takes no
	// row lock and cannot fail to serialize.
	beginReadSQL = "begin isolation level repeatable read read only"
	commitSQL    = "commit"
	rollbackSQL  = "rollback"
)

// Exec runs a statement, after BEGIN in the same round trip if it is the
// transaction's first.
func (t *ownTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if t.begun {
		res, err := execOn(ctx, t.conn, q, args)
		return res, t.note(err)
	}
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue(q, args...)
	br := t.conn.SendBatch(ctx, b)
	t.begun = true
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return engine.Result{}, t.note(err)
	}
	return engine.Result{RowsAffected: tag.RowsAffected()}, nil
}

// execCommit runs q as the transaction's one statement: BEGIN, q and
// COMMIT in one round trip. The transaction is over when it returns nil;
// after an error the caller rolls it back.
func (t *ownTx) execCommit(ctx context.Context, q string, args []any) (engine.Result, error) {
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue(q, args...)
	b.Queue(commitSQL)
	br := t.conn.SendBatch(ctx, b)
	t.begun = true
	_, err := br.Exec()
	var tag, end pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		end, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && end.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		return engine.Result{}, t.note(err)
	}
	t.release()
	return engine.Result{RowsAffected: tag.RowsAffected()}, nil
}

// Query runs a statement that returns rows, after BEGIN in the same round
// trip if it is the transaction's first.
func (t *ownTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if t.begun {
		rows, err := t.conn.Query(ctx, q, args...)
		return rows, t.note(err)
	}
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue(q, args...)
	br := t.conn.SendBatch(ctx, b)
	t.begun = true
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, t.note(err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, t.note(err)
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// Pipeline sends stmts in one batch, after BEGIN if they are the
// transaction's first: one round trip.
func (t *ownTx) Pipeline(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	return t.send(ctx, stmts, read, false)
}

// PipelineCommit sends stmts and COMMIT in one batch (after BEGIN if they
// are the first): the transaction is over when it returns nil, and Commit
// does nothing more.
func (t *ownTx) PipelineCommit(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	return t.send(ctx, stmts, read, true)
}

func (t *ownTx) send(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error, commit bool) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	b := &pgx.Batch{}
	begin := !t.begun
	if begin {
		b.Queue(t.begin)
	}
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	if commit {
		b.Queue(commitSQL)
	}
	br := t.conn.SendBatch(ctx, b)
	t.begun = true
	if err := readBatch(br, begin, stmts, read, commit); err != nil {
		_ = br.Close()
		return t.note(err)
	}
	if err := br.Close(); err != nil {
		return t.note(err)
	}
	if commit {
		t.release()
	}
	return nil
}

// readBatch reads a batch's results: BEGIN's if sent, each statement's
// (rows to read), and COMMIT's, which must report a commit.
func readBatch(br pgx.BatchResults, begin bool, stmts []engine.Stmt, read func(int, engine.Rows) error, commit bool) error {
	if begin {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for i, st := range stmts {
		if !st.Rows {
			if _, err := br.Exec(); err != nil {
				return err
			}
			continue
		}
		rows, err := br.Query()
		if err == nil {
			err = engine.ReadRows(i, rows, read)
		}
		if err != nil {
			return err
		}
	}
	if commit {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
	}
	return nil
}

// Commit commits, unless PipelineCommit did; a transaction that sent
// nothing has nothing to commit.
func (t *ownTx) Commit(ctx context.Context) error {
	if t.done {
		return nil
	}
	defer t.release()
	if !t.begun {
		return nil
	}
	tag, err := t.conn.Exec(ctx, commitSQL)
	if err != nil {
		return fmt.Errorf("commit: %w", t.note(err))
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback aborts; it is a no-op once the transaction is over.
func (t *ownTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	defer t.release()
	if !t.begun || t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	if _, err := t.conn.Exec(ctx, rollbackSQL); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

// release gives the connection back to the pool, once; a connection
// whose session refused a write as read-only is closed instead, so that
// the pool connects anew.
func (t *ownTx) release() {
	if !t.done {
		t.done = true
		if t.readOnly {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = t.conn.Conn().Close(ctx) // the pool destroys a closed connection
			cancel()
		}
		t.conn.Release()
	}
}

// note remembers that err says the session takes no writes, and returns
// it.
func (t *ownTx) note(err error) error {
	if readOnlySession(err) {
		t.readOnly = true
	}
	return err
}

// readOnlySession reports whether err is the server refusing a write
// because the session's transactions are read-only (SQLSTATE 25006): a
// standby, or a primary fenced with default_transaction_read_only for a
// switchover. The pool keeps such a connection, and, in a busy process,
// reuses it until its MaxConnLifetime (an hour by default), every write
// failing, even once the database's name leads to a primary that takes
// writes; the store closes it instead, and the next write connects anew.
func readOnlySession(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "25006" // read_only_sql_transaction
}

// batchRows are the rows of a query sent after BEGIN in one batch:
// closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
