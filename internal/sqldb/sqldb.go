// Package sqldb adapts database/sql to the store's executor interfaces, for
// the MySQL and SQLite stores and for callers' *sql.Tx in EnqueueTx.
package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/sluicequeue/sluice/internal/engine"
)

// querier is what *sql.DB, *sql.Tx and *sql.Conn have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Executor wraps a *sql.DB, *sql.Tx or *sql.Conn.
type Executor struct{ q querier }

// Wrap returns an executor over q.
func Wrap(q querier) Executor { return Executor{q: q} }

// Exec runs a statement.
func (e Executor) Exec(ctx context.Context, query string, args ...any) (engine.Result, error) {
	r, err := e.q.ExecContext(ctx, query, args...)
	if err != nil {
		return engine.Result{}, err
	}
	n, _ := r.RowsAffected()
	id, _ := r.LastInsertId()
	return engine.Result{RowsAffected: n, LastInsertID: id}, nil
}

// Query runs a statement that returns rows.
func (e Executor) Query(ctx context.Context, query string, args ...any) (engine.Rows, error) {
	r, err := e.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

type rows struct{ *sql.Rows }

func (r rows) Close() { _ = r.Rows.Close() }

// DB is a store pool over *sql.DB.
type DB struct {
	Executor
	db *sql.DB
	// shared is set for a pool the caller owns: Close leaves it open.
	shared bool
	// txOpts are what the store's transactions begin with.
	txOpts *sql.TxOptions
	// readOnly, if set, tells an error that says the session takes no
	// writes (DiscardReadOnly).
	readOnly func(error) bool
}

// NewDB wraps db, which the store then owns: Close closes it.
func NewDB(db *sql.DB) *DB { return &DB{Executor: Wrap(db), db: db} }

// NewSharedDB wraps a pool its caller owns and closes: Close leaves it
// open. The store's transactions begin with opts (nil: the pool's
// defaults).
func NewSharedDB(db *sql.DB, opts *sql.TxOptions) *DB {
	return &DB{Executor: Wrap(db), db: db, shared: true, txOpts: opts}
}

// DiscardReadOnly makes the store close, rather than give back to the
// pool, a connection on which a write failed with an error readOnly
// recognises: the session takes no writes (a primary fenced read-only for
// a switchover, a replica the name led to). The pool keeps such a
// connection and, in a busy process, reuses it until its ConnMaxLifetime,
// every write failing, even once the database's name leads to a server
// that takes writes; closed, the next write connects anew. It applies to
// the store's transactions and to its statements outside one (Exec).
func (d *DB) DiscardReadOnly(readOnly func(error) bool) *DB {
	d.readOnly = readOnly
	return d
}

// Exec runs a statement outside a transaction; on a connection of its
// own when a read-only session's must be discarded (DiscardReadOnly).
func (d *DB) Exec(ctx context.Context, query string, args ...any) (engine.Result, error) {
	if d.readOnly == nil {
		return d.Executor.Exec(ctx, query, args...)
	}
	c, err := d.db.Conn(ctx)
	if err != nil {
		return engine.Result{}, err
	}
	res, err := Wrap(c).Exec(ctx, query, args...)
	release(c, d.readOnly(err))
	return res, err
}

// release gives c back to the pool, or closes it when discard is set.
func release(c *sql.Conn, discard bool) {
	if discard {
		_ = c.Raw(func(any) error { return driver.ErrBadConn }) // database/sql closes a connection that reports it
		return
	}
	_ = c.Close()
}

// SQL returns the wrapped *sql.DB.
func (d *DB) SQL() *sql.DB { return d.db }

// Begin starts a transaction; on a connection of its own when a
// read-only session's must be discarded (DiscardReadOnly).
func (d *DB) Begin(ctx context.Context) (engine.Tx, error) { return d.begin(ctx, d.txOpts) }

func (d *DB) begin(ctx context.Context, opts *sql.TxOptions) (engine.Tx, error) {
	if d.readOnly == nil {
		return begin(ctx, d.db, opts)
	}
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	t, err := begin(ctx, c, opts)
	if err != nil {
		release(c, d.readOnly(err))
		return nil, err
	}
	tx := t.(*Tx)
	tx.conn, tx.readOnly = c, d.readOnly
	return tx, nil
}

// readOpts are what BeginRead's transactions begin with: on MySQL, SET
// TRANSACTION ISOLATION LEVEL REPEATABLE READ and START TRANSACTION READ
// ONLY (a consistent read of one snapshot, whatever the sessions'
// default level); on SQLite a deferred BEGIN (modernc.org/sqlite begins a
// read-only transaction without the pool's _txlock=immediate, and ignores
// the level), which takes no write lock.
var readOpts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// BeginRead starts a read-only transaction that reads one snapshot.
func (d *DB) BeginRead(ctx context.Context) (engine.Tx, error) { return d.begin(ctx, readOpts) }

// beginner is what *sql.DB and *sql.Conn have in common to begin
// transactions.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// begin starts a transaction on b with opts.
func begin(ctx context.Context, b beginner, opts *sql.TxOptions) (engine.Tx, error) {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Tx{Executor: Wrap(tx), tx: tx}, nil
}

// Session takes one connection of the pool, whose transactions begin as
// the pool's do.
func (d *DB) Session(ctx context.Context) (engine.Session, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &Session{Executor: Wrap(c), conn: c, txOpts: d.txOpts}, nil
}

var _ engine.Sessioner = (*DB)(nil)

// Session is one connection of a pool, over *sql.Conn.
type Session struct {
	Executor
	conn   *sql.Conn
	txOpts *sql.TxOptions
}

// Begin starts a transaction on the session's connection.
func (s *Session) Begin(ctx context.Context) (engine.Tx, error) { return begin(ctx, s.conn, s.txOpts) }

// Close gives the connection back to the pool.
func (s *Session) Close() error { return s.conn.Close() }

// Discard closes the connection instead of giving it back: database/sql
// drops a connection that reports driver.ErrBadConn. A connection that
// database/sql has dropped already (a failed statement broke it) is
// closed.
func (s *Session) Discard() error {
	err := s.conn.Raw(func(any) error { return driver.ErrBadConn })
	if err != nil && !errors.Is(err, driver.ErrBadConn) && !errors.Is(err, sql.ErrConnDone) {
		return err
	}
	return nil
}

// Close closes the pool, unless its caller owns it (NewSharedDB).
func (d *DB) Close() error {
	if d.shared {
		return nil
	}
	return d.db.Close()
}

// WrapTx adapts a caller's *sql.Tx.
func (d *DB) WrapTx(tx any) (engine.Executor, error) {
	if err := engine.CheckTx(tx); err != nil {
		return nil, err
	}
	if t, ok := tx.(*sql.Tx); ok {
		return Wrap(t), nil
	}
	return nil, fmt.Errorf("this store takes a *sql.Tx, not a %T", tx)
}

// Tx is a transaction over *sql.Tx.
type Tx struct {
	Executor
	tx *sql.Tx
	// conn, if set, is the connection the transaction holds apart from
	// the pool (DiscardReadOnly): it goes back when the transaction
	// ends, or is closed if a statement found the session read-only.
	conn     *sql.Conn
	readOnly func(error) bool
	discard  bool
}

// Exec runs a statement in the transaction.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (engine.Result, error) {
	res, err := t.Executor.Exec(ctx, query, args...)
	return res, t.note(err)
}

// Query runs a statement that returns rows in the transaction.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (engine.Rows, error) {
	rows, err := t.Executor.Query(ctx, query, args...)
	return rows, t.note(err)
}

// note remembers an error that says the session takes no writes.
func (t *Tx) note(err error) error {
	if err != nil && t.readOnly != nil && t.readOnly(err) {
		t.discard = true
	}
	return err
}

// Commit commits the transaction.
func (t *Tx) Commit(context.Context) error {
	err := t.note(t.tx.Commit())
	t.end()
	return err
}

// Rollback aborts the transaction; it is a no-op after Commit.
func (t *Tx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	t.end()
	if err != nil && err != sql.ErrTxDone {
		return err
	}
	return nil
}

// end gives back, or closes, the connection the transaction held apart.
func (t *Tx) end() {
	if t.conn != nil {
		release(t.conn, t.discard)
		t.conn = nil
	}
}
