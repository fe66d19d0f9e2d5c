package postgres_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// sessionScoped matches SQL that leaves state on the server connection
// past its transaction, which a pooler in transaction mode would hand to
// the next client: SET without LOCAL, set_config(…, false), session
// advisory locks, temporary tables, PREPARE, LISTEN, cursors WITH HOLD.
var sessionScoped = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(^|;)\s*SET\s+(SESSION\s+)?[a-z_.]+\s*(=|TO)\s`),
	regexp.MustCompile(`(?i)set_config\s*\([^;]*,\s*false\s*\)`),
	regexp.MustCompile(`(?i)\bpg_(try_)?advisory_(lock|lock_shared|unlock|unlock_shared|unlock_all)\b`),
	regexp.MustCompile(`(?i)\bCREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\b`),
	regexp.MustCompile(`(?i)(^|;)\s*(PREPARE|LISTEN|DISCARD)\s`),
	regexp.MustCompile(`(?i)\bWITH\s+HOLD\b`),
}

// No statement of the catalog, nor of a migration, keeps state on its
// connection past its transaction (docs/operations.md, "PostgreSQL behind
// PgBouncer"): behind a pooler in transaction mode, the next transaction
// on that server connection may be another client's. Settings are SET
// LOCAL or set_config(…, true), the migration lock is
// pg_advisory_xact_lock; the one LISTEN is the listener's, on a
// connection of its own.
func TestNoStatementKeepsSessionState(t *testing.T) {
	check := func(where, text string) {
		for _, re := range sessionScoped {
			require.False(t, re.MatchString(text), "%s keeps session state (%s):\n%s", where, re, text)
		}
	}
	for _, d := range []postgres.Dialect{{}, {NoNotify: true, NoAdvisoryLock: true}} {
		checked := testdb.EachStatement(t, d, func(name, text string, _ []any) { check(name, text) })
		require.Greater(t, checked, 50, "the catalog's statements")
	}
	// The rule's own test: what it must catch.
	for _, bad := range []string{"SET lock_timeout = '1s'", "SELECT pg_advisory_lock(1)", "SELECT set_config('a.b', 'c', false)", "CREATE TEMP TABLE x (id int)", "LISTEN sluice_ready"} {
		caught := false
		for _, re := range sessionScoped {
			caught = caught || re.MatchString(bad)
		}
		require.True(t, caught, bad)
	}
	for _, ok := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "UPDATE sluice_jobs SET state = 'ready'", "SELECT pg_advisory_xact_lock(7251002)"} {
		for _, re := range sessionScoped {
			require.False(t, re.MatchString(ok), ok)
		}
	}
	migrations := postgres.Dialect{}.Migrations()
	require.NoError(t, fs.WalkDir(migrations, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		b, err := fs.ReadFile(migrations, path)
		check(path, string(b))
		return err
	}))
}
