// Package sqlite is sluice's SQLite store, over modernc.org/sqlite (pure
// Go, no cgo): the embedded default.
//
// The database runs in WAL mode with a busy timeout, and every transaction
// takes the write lock at once (BEGIN IMMEDIATE), so there is one writer at
// a time and claims never deadlock. The store keeps one connection, so the
// writers of one process queue in Go rather than in SQLite's busy handler.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Synchronous modes: how often SQLite waits for the disk.
const (
	// SyncFull waits for the disk at every commit: a committed job survives
	// a power loss. The default.
	SyncFull = "FULL"
	// SyncNormal waits at checkpoints only. In WAL mode a commit survives
	// the process crashing but the last commits before a power loss or an
	// OS crash may be lost. About 30% faster.
	SyncNormal = "NORMAL"
)

// walSizeLimit is the size, in bytes, SQLite truncates the write-ahead log
// back to once a checkpoint has emptied it (PRAGMA journal_size_limit).
// Without it the -wal file keeps the largest size it ever reached: a read
// transaction held open for a while (a backup, a long report) stops
// checkpoints from emptying the log, which grows with every commit until
// that read ends, and then stays that size until the last connection to
// the file closes. Normal work keeps the log near SQLite's checkpoint
// threshold (1000 pages, about 4 MiB), well under it. A variable so that
// tests can lower it.
var walSizeLimit int64 = 64 << 20

// Options tune how the database file is opened.
type Options struct {
	// Synchronous is SyncFull (the default) or SyncNormal.
	Synchronous string
	// BusyTimeoutMillis is how long a writer waits for another process's
	// write lock. Defaults to 10000.
	BusyTimeoutMillis int
}

// Open opens (creating if needed) the SQLite database file at path. It does
// not migrate; run MigrateUp on the store, or `sluice migrate up`.
func Open(ctx context.Context, path string, opts Options) (*engine.Store, error) {
	dsn, err := DSN(path, opts)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return engine.New(Dialect{}, sqldb.NewDB(db)), nil
}

// DSN returns the data source name Open opens path with, for
// sql.Open("sqlite", dsn): WAL mode, the busy timeout, the synchronous
// mode, a write-ahead log truncated back to 64 MiB once a checkpoint has
// emptied it, and transactions that take the write lock at once. An app that
// opens its own *sql.DB for OpenDB should open it with this. path is the
// file's name as it is, not a URL: its '%', '?' and '#' name that file.
func DSN(path string, opts Options) (string, error) {
	if path == "" {
		return "", errors.New("sqlite: empty database path")
	}
	sync := strings.ToUpper(opts.Synchronous)
	if sync == "" {
		sync = SyncFull
	}
	if sync != SyncFull && sync != SyncNormal {
		return "", fmt.Errorf("sqlite: synchronous must be full or normal, not %q", opts.Synchronous)
	}
	busy := opts.BusyTimeoutMillis
	if busy <= 0 {
		busy = 10000
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	q.Add("_txlock", "immediate")
	// SQLite reads a name that starts with file: as a URI: its path is
	// percent-decoded and ends at a '?' or '#'. The path is escaped so
	// that SQLite opens the file of that very name. An absolute path goes
	// after an empty authority (file:///abs): file://x would name host x.
	name := "file:" + escapePath(path)
	if strings.HasPrefix(path, "/") {
		name = "file://" + escapePath(path)
	}
	return name + "?" + q.Encode(), nil
}

// Dialect is SQLite's SQL.
type Dialect struct{}

// Name returns "sqlite".
func (Dialect) Name() string { return "sqlite" }

// Migrations returns the embedded migrations.
func (Dialect) Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// IsUndefinedTable recognises "no such table" and "no such column".
func (Dialect) IsUndefinedTable(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column")
}

// IsDataError recognises SQLite refusing a value: a constraint (NOT
// NULL, UNIQUE, CHECK, a foreign key), a string or blob too big, or a
// datatype mismatch.
func (Dialect) IsDataError(err error) bool {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
			return true
		}
	}
	return false
}

var _ engine.DataErrorer = Dialect{}

// IsRetryable recognises a busy or locked database.
func (Dialect) IsRetryable(err error) bool {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}
