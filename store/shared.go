package store

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
)

// The constructors below open a store on a connection pool the app
// already has, so that the app and sluice share its connections and the
// app can enqueue inside its own transactions (Client.EnqueueTx). The app
// owns the pool: Store.Close leaves it open. Each checks that the database
// answers; none migrates.

// OpenPostgresPool returns a store over the app's *pgxpool.Pool. Workers
// LISTEN on one connection of their own, outside the pool but made as the
// pool makes its connections: from a copy of its ConnConfig, through its
// BeforeConnect hook (a rotating password, such as an IAM token, or the
// address of the primary) and AfterConnect hook, and closed through its
// BeforeClose hook. Behind a pooler in transaction mode (PgBouncer), the
// pool's ConnConfig needs a DefaultQueryExecMode that prepares no named
// statement (pgx.QueryExecModeCacheDescribe): it refuses pgx's default
// there when it finds one; the listener then hears nothing, says so in a
// warning, and workers poll (docs/operations.md, "PostgreSQL behind
// PgBouncer").
func OpenPostgresPool(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	return shared(postgres.OpenPool(ctx, pool))(opts)
}

// OpenMySQLDB returns a store over the app's *sql.DB, opened with
// go-sql-driver/mysql. sluice's transactions run at READ COMMITTED (asked
// for per transaction when the sessions default to another level), and the
// sessions' time zone must not shift for daylight saving: UTC, a fixed
// offset, or SYSTEM on a UTC host. The sessions' character set must be
// utf8mb4, the driver's default: a pool opened with another (charset=gbk)
// is refused, whether or not it interpolates its parameters. A TiDB
// server is refused, as by Open.
func OpenMySQLDB(ctx context.Context, db *sql.DB, opts ...Option) (*Store, error) {
	return shared(mysql.OpenDB(ctx, db))(opts)
}

// OpenSQLiteDB returns a store over the app's *sql.DB, opened with
// modernc.org/sqlite — best with SQLiteDSN and one open connection
// (SQLite has one writer).
func OpenSQLiteDB(ctx context.Context, db *sql.DB, opts ...Option) (*Store, error) {
	return shared(sqlite.OpenDB(ctx, db))(opts)
}

// SQLiteDSN returns the data source name for sql.Open("sqlite", dsn) that
// Open uses for the file at path: WAL mode, a busy timeout, synchronous
// FULL, and transactions that take the write lock at once.
func SQLiteDSN(path string) (string, error) { return sqlite.DSN(path, sqlite.Options{}) }

// shared wraps a store a driver opened on an app's pool.
func shared(e *engine.Store, err error) func([]Option) (*Store, error) {
	return func(opts []Option) (*Store, error) {
		if err != nil {
			return nil, err
		}
		return wrap(e, opts), nil
	}
}
