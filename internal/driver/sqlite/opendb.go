package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
)

// OpenDB returns a store over a *sql.DB the app already has (opened with
// modernc.org/sqlite, best with DSN, and one open connection, as Open
// does: SQLite has one writer), so that the app can enqueue inside its own
// transactions on it (Client.EnqueueTx with a *sql.Tx). The app owns the
// pool: Store.Close leaves it open. A pool opened without
// _txlock=immediate starts transactions that take the write lock late; the
// store then retries those that find the database busy. It checks that
// the database answers; it does not migrate.
func OpenDB(ctx context.Context, db *sql.DB) (*engine.Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: OpenDB: the *sql.DB is nil")
	}
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("sqlite: OpenDB: %w", err)
	}
	return engine.New(Dialect{}, sqldb.NewSharedDB(db, nil)), nil
}
