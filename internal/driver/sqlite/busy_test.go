package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/sqlite"
)

// Another process holding the database's write lock (a backup tool's
// BEGIN EXCLUSIVE, an app's long transaction) for longer than the busy
// timeout of every attempt: an operator's pause ran once and failed with
// SQLite's bare "database is locked (5) (SQLITE_BUSY)", which says neither
// who holds it nor what to do, while the transactions beside it waited out
// five timeouts. It now waits as long as they do, and its error says
// what stopped it and to run it again.
func TestAWriteBlockedByAnotherProcesssLockSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeoutMillis: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	_, err = s.MigrateUp(ctx, 0)
	require.NoError(t, err)

	// Another process: its own pool, holding the write lock throughout.
	dsn, err := sqlite.DSN(path, sqlite.Options{})
	require.NoError(t, err)
	other, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	lock, err := other.BeginTx(ctx, nil) // BEGIN IMMEDIATE
	require.NoError(t, err)
	defer func() { require.NoError(t, lock.Rollback()) }()

	err = s.PauseQueue(ctx, "mail", time.Now())
	require.ErrorContains(t, err, "SQLITE_BUSY")
	require.ErrorContains(t, err, "5 attempts")
	require.ErrorContains(t, err, "run it again once that is done")
}
