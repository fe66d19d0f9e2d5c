package cli_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// operations.md: "`OpenStore` lets the app share its own pool
// (`store.OpenPostgresPool`, …)" and "`Open` opens the store as the
// built-ins do". Every built-in command that reads the database must then
// read the app's database, not the default sqlite:sluice.db.
func TestEveryCommandOpensTheAppsStore(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			ctx := context.Background()
			url, _, s := migratedDB(t, b)
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
			res, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(ctx, ping{1})
			require.NoError(t, err)
			app := &cli.App{Name: "myapp", Registry: reg,
				// The app's own pool: the URL of the flag is not used.
				OpenStore: func(ctx context.Context, _ string) (*store.Store, error) { return store.Open(ctx, url) }}
			for _, args := range [][]string{
				{"stats"},
				{"jobs"},
				{"explain", strconv.FormatInt(res.ID, 10)},
				{"recurring"},
			} {
				code, _, stderr := runApp(app, args...)
				if code != 0 {
					t.Errorf("%v: exit %d: %s", args, code, stderr)
				}
			}
			if _, err := os.Stat("sluice.db"); err == nil {
				t.Errorf("a command opened (and created) the default database sqlite:sluice.db instead of the app's store")
			}
		})
	}
}

// operations.md: "Every command takes `--database-url`, else
// `$SLUICE_DATABASE_URL`, else `sqlite:sluice.db` in the current
// directory, and then says so on stderr".
func TestEveryCommandNamesTheDefaultDatabase(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	t.Chdir(t.TempDir())
	code, _, stderr := run(t, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	s, err := store.Open(context.Background(), "sqlite:sluice.db")
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
	res, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(context.Background(), ping{1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, args := range [][]string{
		{"stats"},
		{"explain", strconv.FormatInt(res.ID, 10)},
		{"recurring"},
	} {
		code, _, stderr := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		if !strings.Contains(stderr, "no --database-url or $SLUICE_DATABASE_URL given: using the default database sqlite:sluice.db") {
			t.Errorf("%v does not say it uses the default database; stderr: %q", args, stderr)
		}
	}
}

// check and recurring refuse stray arguments, as every other command does.
func TestCheckAndRecurringRefuseStrayArguments(t *testing.T) {
	for _, args := range [][]string{{"check", "extra"}, {"recurring", "extra"}} {
		code, _, stderr := run(t, append(args, "--database-url", "sqlite:"+t.TempDir()+"/x.db")...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, `takes no arguments, got "extra"`)
		// Named once: "sluice check: check takes …", not "sluice check: sluice check takes …".
		require.Equal(t, 1, strings.Count(stderr, args[0]+" takes"), "%v: %s", args, stderr)
		require.NotContains(t, stderr, "myapp "+args[0]+" takes", "%v: the program named twice", args)
	}
}
