package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/sqlite"
)

// walSize returns the size of the write-ahead log of the file at path.
func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	return fi.Size()
}

// A read transaction another process holds open (a backup, a long report)
// keeps checkpoints from emptying the write-ahead log, which grows with
// every commit meanwhile. Once the read ended, checkpoints emptied the log
// again but the -wal file kept its largest size for as long as any
// process kept the file open — for days, with workers running: 270 MB
// after 30,000 jobs were enqueued and run during a 20 s read. The store
// now opens the file with a journal_size_limit, and SQLite truncates the
// log back to it once a checkpoint has emptied it.
func TestTheWriteAheadLogShrinksBackOnceALongReadEnds(t *testing.T) {
	defer sqlite.SetWALSizeLimit(256 << 10)()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: sqlite.SyncNormal})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	_, err = s.DB().Exec(ctx, `CREATE TABLE filler (b BLOB)`)
	require.NoError(t, err)

	// Another process's read, holding its snapshot.
	dsn, err := sqlite.DSN(path, sqlite.Options{})
	require.NoError(t, err)
	other, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	read, err := other.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	var n int
	require.NoError(t, read.QueryRowContext(ctx, `SELECT COUNT(*) FROM filler`).Scan(&n))

	// About 1,600 pages, over SQLite's checkpoint threshold of 1,000.
	for range 100 {
		_, err := s.DB().Exec(ctx, `INSERT INTO filler (b) VALUES (zeroblob(65536))`)
		require.NoError(t, err)
	}
	grown := walSize(t, path)
	require.Greater(t, grown, int64(4<<20), "the read kept the log from being checkpointed")

	require.NoError(t, read.Commit())
	// The first commit checkpoints the whole log; the next starts it over.
	for range 3 {
		_, err := s.DB().Exec(ctx, `DELETE FROM filler WHERE rowid = (SELECT MIN(rowid) FROM filler)`)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, walSize(t, path), int64(256<<10), "the log is still %d bytes, as large as it grew", walSize(t, path))
}
