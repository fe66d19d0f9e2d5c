package cli_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A database a newer sluice migrated (a version this binary does not know
// is recorded): `migrate status` lists it, `migrate up` says so beside
// "up to date", `migrate down` refuses naming it and reverts nothing, and
// `check` warns (W010).
func TestMigrateAndCheckReportANewerSluicesMigrations(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			url := b.URL(t)
			db := "--database-url=" + url
			code, _, stderr := run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			s := testdb.Opener(t, url)()
			latest, err := s.LatestVersion()
			require.NoError(t, err)
			newer := fmt.Sprintf("%03d", latest+1)
			q, args := s.SQL().RecordMigration(latest+1, "from_the_future", 1)
			_, err = s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)

			code, out, stderr := run(t, "migrate", "status", db)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, newer+` +\? +applied by a newer sluice`, out)
			require.Contains(t, out, "the database has "+newer+" applied, newer than this sluice knows")

			code, out, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "up to date, and newer: the database has "+newer+" applied")

			code, out, stderr = run(t, "migrate", "down", db)
			require.NotEqual(t, 0, code)
			require.Contains(t, stderr, "migration "+newer+" is applied")
			require.NotContains(t, out, "reverted")
			st, err := s.MigrationStatus(ctx)
			require.NoError(t, err)
			require.Empty(t, engine.Pending(st), "a refused down reverts nothing")

			code, _, stderr = run(t, "migrate", "down", "99", db)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, "and the database has "+newer+" applied, newer than this sluice knows: this one reverts nothing")
			require.NotContains(t, stderr, "say migrate down", "a down that would be refused is not suggested")

			code, out, stderr = run(t, "check", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "W010 warning: the database has migration "+newer+" applied")
			code, _, _ = run(t, "check", "--strict", db)
			require.NotEqual(t, 0, code)
			if !s.SQL().TracksMigrationProgress() {
				return // PostgreSQL and SQLite roll a failed migration back whole
			}
			// MySQL: the newer sluice's next migration failed part way.
			further := fmt.Sprintf("%03d", latest+2)
			q, args = s.SQL().SaveMigrationProgress(latest+2, "up", 1)
			_, err = s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
			code, out, stderr = run(t, "migrate", "status", db)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, further+` +\? +partly applied by a newer sluice: 1 statement ran`, out)
			require.Contains(t, out, "the database has "+newer+" applied, "+further+" partly applied, newer than this sluice knows")
			code, out, stderr = run(t, "check", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "W010 warning: the database has migration "+newer+" applied, migration "+further+" partly applied")
		})
	}
}
