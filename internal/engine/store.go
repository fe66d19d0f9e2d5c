// Package store is sluice's storage: the contract every database meets,
// the migrations, and the one algorithm for enqueue, claim, deferral,
// promotion and recovery that runs on all of them, with every statement
// written once in its catalog (sql/*.sql). The packages beside it
// (internal/driver/postgres, mysql, sqlite) supply only a Dialect (the
// database's capabilities and the few statements it spells its own way)
// and a connection pool.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrPendingMigrations is returned when the database's schema is missing
// or older than this version of sluice needs. Run `sluice migrate up`.
var ErrPendingMigrations = errors.New("sluice: the database schema is missing or out of date (pending migrations; run `sluice migrate up`)")

// Store runs sluice's operations against one database.
type Store struct {
	d        Dialect
	q        *SQL
	db       DB
	schemaOK atomic.Bool
	marks    atomic.Uint64 // the last Mark's number
	wake     wakeHub
	sweeps   sweepHub
	discards discardHub
	// DeleteOnComplete deletes jobs when they complete instead of keeping
	// them for inspection. Defaults to false.
	DeleteOnComplete bool
	// MigrationLockWait is how long MigrateUp and MigrateDown wait for the
	// migration lock another migrator holds, where the lock has a wait of
	// its own (MySQL); 0 means DefaultMigrationLockWait. Elsewhere they
	// wait until the lock is free or their context is done.
	MigrationLockWait time.Duration
}

// New returns a store over db speaking d, with the statement catalog
// rendered for d. It panics if d's statements do not render, a mistake in
// the dialect that any test of it shows.
func New(d Dialect, db DB) *Store { return &Store{d: d, q: MustSQL(d), db: db} }

// MustSQL renders the statement catalog for d, as NewSQL, and panics if
// it does not render.
func MustSQL(d Dialect) *SQL {
	q, err := NewSQL(d)
	if err != nil {
		panic(fmt.Sprintf("sluice: the %s dialect's statements: %v", d.Name(), err))
	}
	return q
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// SQL returns the store's statements, rendered for its database.
func (s *Store) SQL() *SQL { return s.q }

// DB returns the store's pool.
func (s *Store) DB() DB { return s.db }

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

// maxRetries bounds how many times a transaction that hit a deadlock or a
// serialization failure is run again.
const maxRetries = 5

// inTx runs fn in a transaction, committing if it returns nil. A deadlock
// or serialization failure runs it again, up to maxRetries times, and so
// does a report of missingBudgets once inTx has created them, so fn
// must start from fresh inputs on every call: whatever it computed or
// changed in a failed attempt is rolled back in the database and must not
// survive in Go either. Public operations pass its error through wrap.
func (s *Store) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return s.inTxOn(ctx, s.db.Begin, fn)
}

// inTxOn is inTx with transactions that begin, which may start them on
// one connection of the pool (a migrator's Session) instead of any.
func (s *Store) inTxOn(ctx context.Context, begin func(context.Context) (Tx, error), fn func(tx Tx) error) error {
	return s.retryTx(ctx, func() error { return s.tryTx(ctx, begin, fn) })
}

// openTx is inTxOn that leaves open the transaction fn succeeded in, for
// the caller to commit or roll back: a failed attempt is rolled back and
// run again as inTx runs it, but a failure of the caller's commit is the
// caller's to handle.
func (s *Store) openTx(ctx context.Context, begin func(context.Context) (Tx, error), fn func(tx Tx) error) (Tx, error) {
	var open Tx
	err := s.retryTx(ctx, func() error {
		var err error
		open, err = runTx(ctx, begin, fn)
		return err
	})
	if err != nil {
		return nil, err
	}
	return open, nil
}

// retryTx runs try, which runs one transaction, again after a deadlock or
// serialization failure, up to maxRetries times in all, and after a
// report of missingBudgets once it has created them. When every attempt
// met another transaction's locks, its error says so and what to do.
func (s *Store) retryTx(ctx context.Context, try func() error) error {
	var err error
	for attempt := 0; attempt < maxRetries; attempt++ {
		err = try()
		var missing missingBudgets
		if errors.As(err, &missing) && ctx.Err() == nil {
			if err = s.createBudgets(ctx, missing); err != nil {
				return err
			}
			err = missing // reported if no attempt is left
			continue
		}
		if err == nil || !s.retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	if err != nil && s.retryable(err) {
		return fmt.Errorf("%w (%d attempts, each stopped by another transaction's locks: a long transaction, a backup or a migration holding the database, or on SQLite another process writing for longer than the busy timeout; run it again once that is done)", err, maxRetries)
	}
	return err
}

// execAlone runs one statement in a transaction of its own, again after
// a deadlock or a serialization failure, or on SQLite after the database
// stayed busy past the busy timeout (another process's long transaction, a
// backup, a migration), as retryTx runs a transaction again: a statement
// that failed so changed nothing. Without it an operator's pause, an
// override, or a heartbeat failed at the first busy timeout while the
// transactions around them waited out five.
func (s *Store) execAlone(ctx context.Context, q string, args []any) (Result, error) {
	var res Result
	err := s.retryTx(ctx, func() error {
		var err error
		res, err = exec(ctx, s.db, q, args)
		return err
	})
	return res, err
}

// queryAlone is execAlone for a statement that returns one int64 column
// (an INSERT … RETURNING).
func (s *Store) queryAlone(ctx context.Context, q string, args []any) ([]int64, error) {
	var out []int64
	err := s.retryTx(ctx, func() error {
		var err error
		out, err = queryInt64s(ctx, s.db, q, args)
		return err
	})
	return out, err
}

// Retryable is implemented by errors that say the whole transaction may
// simply run again, as a deadlock or a serialization failure does: a
// pool wrapper's own errors (a test's injected failures) use it to be
// treated as the database's would.
type Retryable interface {
	Retryable() bool
}

// retryable reports whether err lets a transaction run again.
func (s *Store) retryable(err error) bool {
	var r Retryable
	return s.d.IsRetryable(err) || errors.As(err, &r) && r.Retryable()
}

// tryTx runs fn in one transaction begin starts, and commits it.
func (s *Store) tryTx(ctx context.Context, begin func(context.Context) (Tx, error), fn func(tx Tx) error) error {
	tx, err := runTx(ctx, begin, fn)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// runTx begins a transaction and runs fn in it, returning it open, or
// rolled back when fn fails.
func runTx(ctx context.Context, begin func(context.Context) (Tx, error), fn func(tx Tx) error) (Tx, error) {
	tx, err := begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	return tx, nil
}

// wrap turns "no such table" into ErrPendingMigrations.
func (s *Store) wrap(err error) error {
	if err != nil && s.d.IsUndefinedTable(err) {
		s.schemaOK.Store(false)
		return fmt.Errorf("%w: %v", ErrPendingMigrations, err)
	}
	return err
}

// exec runs one statement built by the dialect.
func exec(ctx context.Context, ex Executor, q string, args []any) (Result, error) {
	return ex.Exec(ctx, q, args...)
}

// queryInt64s runs a statement returning one int64 column.
func queryInt64s(ctx context.Context, ex Executor, q string, args []any) ([]int64, error) {
	return queryColumn[int64](ctx, ex, q, args)
}

// queryColumn runs a statement returning one column of T.
func queryColumn[T any](ctx context.Context, ex Executor, q string, args []any) ([]T, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
