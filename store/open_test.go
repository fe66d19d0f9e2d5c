package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/store"
)

func TestOpenPicksSQLiteFromPathsAndURLs(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{
		filepath.Join(dir, "a.db"),
		"sqlite:" + filepath.Join(dir, "b.db"),
		"sqlite://" + filepath.Join(dir, "c.db") + "?synchronous=normal",
	} {
		s, err := store.Open(context.Background(), u)
		require.NoError(t, err, u)
		require.Equal(t, "sqlite", s.Backend())
		require.NoError(t, s.Close())
	}
}

func TestOpenRefusesUnknownSchemesAndParameters(t *testing.T) {
	_, err := store.Open(context.Background(), "redis://localhost:6379")
	require.ErrorContains(t, err, `unknown database URL scheme "redis"`)
	_, err = store.Open(context.Background(), "sqlite:x.db?journal=off")
	require.ErrorContains(t, err, `unknown URL parameter "journal"`)
	_, err = store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "x.db")+"?synchronous=off")
	require.ErrorContains(t, err, "synchronous must be full or normal")
	_, err = store.Open(context.Background(), "mysql://root@127.0.0.1:3306/")
	require.ErrorContains(t, err, "names no database")
}

// A malformed URL's error names the problem and the URL, masked.
func TestOpenErrorsShowTheURLMasked(t *testing.T) {
	for raw, want := range map[string]string{
		"mysql://u:s3cret@host:notaport/db": "mysql: malformed URL: invalid port after host (in mysql://u:xxxxx@host:notaport/db)",
		"mysql://u:s3cret@[::1/db":          "mysql: malformed URL: missing ']' in host (in mysql://u:xxxxx@[::1/db)",
		"postgres://u:s3cret@[::1/db":       "postgres: cannot parse the connection string: failed to parse as URL",
		"postgres://u:s3cret@host:nope/db":  "postgres: cannot parse the connection string: invalid port (in postgres://u:xxxxx@host:nope/db)",
	} {
		_, err := store.Open(context.Background(), raw)
		require.ErrorContains(t, err, want, raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
	}
}
