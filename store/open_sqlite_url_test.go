package store_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// A sqlite: or file: URL is a URL: its path is percent-decoded, in the
// hierarchical form (sqlite:///abs/a%20b.db) and the opaque one
// (sqlite:a%20b.db) alike; a bare path is a file name and is not. The
// file name went to SQLite inside a file: URI, which decoded it for both,
// so a bare path's '%' was decoded, a bare path's '#' cut the name short,
// a URL's bad escape (%zz) was opened as written, and SQLitePath (which
// the CLI prints) showed the name undecoded.
func TestOpenPercentDecodesSQLiteURLsButNotBarePaths(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	open := func(raw string) {
		t.Helper()
		s, err := store.Open(ctx, raw)
		require.NoError(t, err, raw)
		require.NoError(t, s.Close(), raw)
	}
	for raw, file := range map[string]string{
		"sqlite://" + filepath.Join(dir, "a%20b.db"):                      "a b.db",
		"sqlite:" + filepath.Join(dir, "c%20d.db"):                        "c d.db",
		"sqlite:e%20f.db?synchronous=normal":                              "e f.db",
		"file:" + filepath.Join(dir, "g%20h.db"):                          "g h.db",
		"sqlite:" + filepath.Join(dir, "p%3Fq%23r%25.db"):                 "p?q#r%.db",
		filepath.Join(dir, "s%20t.db"):                                    "s%20t.db",
		"u%20v.db?synchronous=normal":                                     "u%20v.db",
		filepath.Join(dir, "w#x.db"):                                      "w#x.db",
		filepath.Join(dir, "100%.db"):                                     "100%.db",
		sqlite.URL(filepath.Join(dir, "y %?#z.db")) + "?synchronous=full": "y %?#z.db",
	} {
		open(raw)
		require.FileExists(t, filepath.Join(dir, file), raw)
		path, ok := dburl.SQLitePath(raw)
		require.True(t, ok, raw)
		require.Equal(t, file, filepath.Base(path), raw)
	}
	for _, name := range []string{"a%20b.db", "s d.db", "s t.db", "u v.db", "w"} {
		require.NoFileExists(t, filepath.Join(dir, name))
	}

	for raw, want := range map[string]string{
		"sqlite:" + filepath.Join(dir, "bad%zz.db"): `invalid URL escape "%zz"`,
		"sqlite:bad%2.db":                          "write a '%' of the file name as %25",
		"sqlite:" + filepath.Join(dir, "bad#1.db"): "write a '#' of the file name as %23",
		"sqlite:bad%00.db":                         "NUL",
	} {
		_, err := store.Open(ctx, raw)
		require.ErrorContains(t, err, want, raw)
		_, ok := dburl.SQLitePath(raw)
		require.False(t, ok, raw)
	}
	for _, name := range []string{"bad%zz.db", "bad%2.db", "bad"} {
		require.NoFileExists(t, filepath.Join(dir, name))
	}

	// SQLiteDSN takes a file's path, not a URL: the file of that very name
	// is opened.
	path := filepath.Join(dir, "dsn %41#?.db")
	dsn, err := store.SQLiteDSN(path)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	require.NoError(t, db.PingContext(ctx))
	require.NoError(t, db.Close())
	_, err = os.Stat(path)
	require.NoError(t, err, "SQLiteDSN(%q) = %q opened another file", path, dsn)
}
