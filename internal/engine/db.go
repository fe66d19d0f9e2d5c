package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// Executor runs statements. It is implemented over a pool, a transaction
// of the store's own, or a caller's transaction (EnqueueTx).
type Executor interface {
	// Exec runs a statement and reports the rows it affected and, where
	// the database reports one, the first id it inserted.
	Exec(ctx context.Context, query string, args ...any) (Result, error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Result is what Exec reports.
type Result struct {
	RowsAffected int64
	LastInsertID int64
}

// Rows is a result set, read with Next and Scan and closed when done.
// Scan destinations are the database/sql ones (sql.NullString and the
// like), which pgx also accepts.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Tx is a transaction the store began.
type Tx interface {
	Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB is a store's connection pool.
type DB interface {
	Executor
	// Begin starts a transaction. On SQLite it takes the write lock at
	// once (BEGIN IMMEDIATE).
	Begin(ctx context.Context) (Tx, error)
	// BeginRead starts a read-only transaction whose statements all read
	// one snapshot of the database, as of its first: REPEATABLE READ READ
	// ONLY on PostgreSQL and MySQL, a deferred BEGIN on SQLite (which in
	// WAL mode reads one snapshot and takes no write lock). Its reads take
	// no row lock and wait for none.
	BeginRead(ctx context.Context) (Tx, error)
	// Close releases the pool.
	Close() error
	// WrapTx adapts a caller's own transaction (pgx.Tx on PostgreSQL,
	// *sql.Tx elsewhere) so that work can join it, or says what type it
	// takes instead.
	WrapTx(tx any) (Executor, error)
}

// Listener is implemented by pools that can wake workers when jobs become
// ready (LISTEN/NOTIFY on PostgreSQL).
type Listener interface {
	// Listen blocks until ctx is done or its connection fails, calling fn
	// with each notification's payload on channel. It calls listening
	// once, on the calling goroutine, when it listens (LISTEN succeeded),
	// before any fn: the notifications sent before then were not heard,
	// and from then on they are.
	Listen(ctx context.Context, channel string, listening func(), fn func(payload string)) error
}

// Sessioner is implemented by pools that can lend one of their
// connections for a run of work. The migrator needs one where the
// database's migration lock belongs to a connection rather than to a
// transaction (MySQL's GET_LOCK): it holds the lock there across the
// transactions of a whole run, and releases it after they commit.
type Sessioner interface {
	// Session takes a connection from the pool until the session is
	// closed or discarded.
	Session(ctx context.Context) (Session, error)
}

// Session is one connection lent by the pool: its statements and
// transactions all run on it.
type Session interface {
	Executor
	// Begin starts a transaction on the session's connection.
	Begin(ctx context.Context) (Tx, error)
	// Close gives the connection back to the pool.
	Close() error
	// Discard closes the connection instead of giving it back, so that
	// the server ends whatever the connection holds (a lock it could
	// not release).
	Discard() error
}

// CheckTx refuses a caller's transaction that is nil, or a nil pointer of
// a transaction's type, which no pool's WrapTx could use; a pool's WrapTx
// calls it before it looks at the type.
func CheckTx(tx any) error {
	if tx == nil {
		return errors.New("the transaction is nil")
	}
	if v := reflect.ValueOf(tx); (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return fmt.Errorf("the transaction is a nil %T; pass the one your Begin returned", tx)
	}
	return nil
}
