package driver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver"
)

func TestEveryBackendIsFoundByNameAndByURL(t *testing.T) {
	urls := map[string][]string{
		"postgres": {"postgres://u@h/db", "postgresql://u@h/db"},
		"mysql":    {"mysql://root@h:3306/db", "MySQL://root@h/db"},
		"sqlite":   {"sqlite:x.db", "sqlite://x.db", "file:x.db", "x.db", "/var/lib/x.db", `C:\jobs\x.db`},
	}
	for _, b := range driver.Backends() {
		got, err := driver.ByName(b.Name)
		require.NoError(t, err)
		require.Equal(t, b.Name, got.Name)
		require.Equal(t, b.Name, b.Dialect.Name(), "the entry's dialect is its own")
		for _, a := range b.Aliases {
			got, err := driver.ByName(a)
			require.NoError(t, err, a)
			require.Equal(t, b.Name, got.Name, a)
		}
		require.NotEmpty(t, urls[b.Name], "a test URL for every backend")
		for _, u := range urls[b.Name] {
			got, err := driver.ForURL(u)
			require.NoError(t, err, u)
			require.Equal(t, b.Name, got.Name, u)
			require.NoError(t, got.Check(u), u)
		}
		require.NotNil(t, b.Open, b.Name)
		require.NotNil(t, b.Scratch, b.Name)
	}
	_, err := driver.ByName("oracle")
	require.ErrorContains(t, err, `unknown dialect "oracle"`)
	_, err = driver.ForURL("redis://localhost:6379")
	require.ErrorContains(t, err, `unknown database URL scheme "redis"`)
	require.ErrorContains(t, err, "postgres:")
}
