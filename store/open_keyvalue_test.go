package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// A PostgreSQL keyword/value connection string, which libpq and pgx
// accept, has no scheme: Open took it for a SQLite file path and created a
// file of that name in the working directory. It is refused, saying what
// it looks like and the URL to write, without the password and without
// creating anything; sqlite:PATH still opens a file of such a name, and
// plain paths open as before.
func TestOpenRefusesAKeywordValueConnectionString(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, raw := range []string{
		"host=localhost user=app dbname=jobs sslmode=disable",
		"host=localhost user=app password=s3cret-pw dbname=jobs",
		"dbname=jobs password='s3cret pw'",
	} {
		s, err := store.Open(context.Background(), raw)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%q) opened a store", raw)
		}
		require.ErrorContains(t, err, "looks like a keyword/value connection string", raw)
		require.ErrorContains(t, err, "postgres://user@host:5432/db", raw)
		require.ErrorContains(t, err, "sqlite:PATH", raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
		require.NotContains(t, dburl.Redact(raw), "s3cret", raw)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "no file is created")

	for _, raw := range []string{
		"sqlite:host=x.db",
		"./jobs.db",
		filepath.Join(dir, "var", "sluice.db"),
	} {
		if strings.Contains(raw, "var") {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "var"), 0o755))
		}
		s, err := store.Open(context.Background(), raw)
		require.NoError(t, err, raw)
		require.Equal(t, "sqlite", s.Backend())
		require.NoError(t, s.Close())
	}
	for _, name := range []string{"host=x.db", "jobs.db", filepath.Join("var", "sluice.db")} {
		require.FileExists(t, filepath.Join(dir, name))
	}
}
