package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// unmigratedURL returns the URL of a fresh database of backend b that
// exists but holds no schema: a SQLite file is created empty (an empty
// file is an empty database to SQLite), as PostgreSQL's and MySQL's
// databases are created by b.URL.
func unmigratedURL(t *testing.T, b testdb.Backend) string {
	t.Helper()
	url := b.URL(t)
	if path, ok := dburl.SQLitePath(url); ok {
		require.NoError(t, os.WriteFile(path, nil, 0o600))
	}
	return url
}

// A command that does not write a schema, run on a SQLite path that does
// not exist (a typo, the wrong directory), used to create an empty
// database file there and then fail on its missing schema, leaving the
// file behind. It refuses the path instead, naming it; migrate up still
// creates the file.
func TestCommandsThatReadRefuseASQLiteFileThatDoesNotExist(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	dir := t.TempDir()
	path := filepath.Join(dir, "typo.db")
	url := "sqlite:" + path
	for _, args := range [][]string{
		{"stats"}, {"jobs"}, {"queues"}, {"queues", "pause", "q"}, {"budgets"}, {"budgets", "clear-idle"},
		{"semaphores"}, {"recurring"}, {"limits"}, {"explain", "1"}, {"check"}, {"processes"},
		{"retry", "1"}, {"cancel", "1"}, {"migrate", "status"}, {"migrate", "down"},
		{"worker"}, {"dispatcher"}, {"ui", "--addr", "127.0.0.1:0"},
	} {
		code, _, stderr := run(t, append(args, "--database-url", url)...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "no database at "+url+": the file does not exist (create it with `myapp migrate up`", "%v", args)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "%v: one line: %q", args, stderr)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "%v left a file behind", args)
	}

	// The default database is refused the same way, by its absolute path.
	t.Chdir(dir)
	code, _, stderr := run(t, "stats")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "no database at sqlite:sluice.db ("+filepath.Join(dir, "sluice.db")+"): the file does not exist")

	code, out, stderr := run(t, "migrate", "up", "--database-url", url)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "applied ")
	code, _, stderr = run(t, "stats", "--database-url", url)
	require.Equal(t, 0, code, stderr)

	// An app's OpenStore opens what it likes: the URL names no file it
	// looks for.
	app := &cli.App{Name: "myapp", OpenStore: func(ctx context.Context, _ string) (*store.Store, error) { return store.Open(ctx, url) }}
	code, _, stderr = runApp(app, "stats", "--database-url", "sqlite:"+filepath.Join(dir, "none.db"))
	require.Equal(t, 0, code, stderr)
}

// An in-memory SQLite database (sqlite::memory:) is new and empty each
// time a command opens it: a command that reads refused it as a file that
// does not exist. It says what such a database is instead.
func TestCommandsThatReadRefuseAnInMemorySQLiteDatabase(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	t.Chdir(t.TempDir())
	for _, url := range []string{"sqlite::memory:", "file::memory:", ":memory:"} {
		for _, args := range [][]string{{"stats"}, {"jobs"}, {"check"}, {"migrate", "status"}} {
			code, _, stderr := run(t, append(args, "--database-url", url)...)
			require.Equal(t, 1, code, "%v: %s", args, stderr)
			require.Contains(t, stderr, "no database at "+url+": an in-memory SQLite database is new and empty each time a command opens it", "%v", args)
			require.NotContains(t, stderr, "does not exist", "%v", args)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "%v: one line: %q", args, stderr)
		}
	}
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	require.Empty(t, entries, "a file was left behind")
}
