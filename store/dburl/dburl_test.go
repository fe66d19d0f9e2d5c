package dburl_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/store/dburl"
)

func TestOpenPicksSQLiteFromPathsAndURLs(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{
		filepath.Join(dir, "a.db"),
		"sqlite:" + filepath.Join(dir, "b.db"),
		"sqlite://" + filepath.Join(dir, "c.db") + "?synchronous=normal",
	} {
		s, err := dburl.Open(context.Background(), u)
		require.NoError(t, err, u)
		require.Equal(t, "sqlite", s.Dialect().Name())
		require.NoError(t, s.Close())
	}
}

func TestOpenRefusesUnknownSchemesAndParameters(t *testing.T) {
	_, err := dburl.Open(context.Background(), "redis://localhost:6379")
	require.ErrorContains(t, err, `unknown database URL scheme "redis"`)
	_, err = dburl.Open(context.Background(), "sqlite:x.db?journal=off")
	require.ErrorContains(t, err, `unknown URL parameter "journal"`)
	_, err = dburl.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "x.db")+"?synchronous=off")
	require.ErrorContains(t, err, "synchronous must be full or normal")
	_, err = dburl.Open(context.Background(), "mysql://root@127.0.0.1:3306/")
	require.ErrorContains(t, err, "names no database")
}

func TestDialectByName(t *testing.T) {
	for _, n := range []string{"postgres", "mysql", "sqlite"} {
		d, err := dburl.Dialect(n)
		require.NoError(t, err)
		require.Equal(t, n, d.Name())
	}
	_, err := dburl.Dialect("oracle")
	require.ErrorContains(t, err, `unknown dialect "oracle"`)
}
