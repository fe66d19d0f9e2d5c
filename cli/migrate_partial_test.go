package cli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: on MySQL, whose DDL commits at once, a migration
// that fails part way keeps the statements that ran; `migrate status`
// says how far it got (it said "pending"), and `migrate up` resumes after
// them once the cause is removed.
func TestMigrateStatusSaysHowFarAFailedMySQLMigrationGot(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		if b.Name != "mysql" {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			url := b.URL(t)
			db := "--database-url=" + url
			code, _, stderr := run(t, "migrate", "up", "--to", "12", db)
			require.Equal(t, 0, code, stderr)
			s := testdb.Opener(t, url)()
			_, err := s.DB().Exec(ctx, "CREATE TABLE sluice_fair_keys (x INT)")
			require.NoError(t, err)

			code, _, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "apply migration 013_fairness: statement 3 of 3")
			require.Contains(t, stderr, "once the cause is fixed, `migrate up` resumes at statement 3")
			code, out, stderr := run(t, "migrate", "status", db)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, `\n012\s+attempts\s+applied\n013\s+fairness\s+partly applied: 2 of 3 statements\n014\s+slot_priority\s+pending\n`, out)

			_, err = s.DB().Exec(ctx, "DROP TABLE sluice_fair_keys")
			require.NoError(t, err)
			code, out, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, afterDB(t, out), "applied 013_fairness\napplied 014_slot_priority\n")
			code, out, stderr = run(t, "migrate", "status", db)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, `\n013\s+fairness\s+applied\n`, out)
		})
	}
}
