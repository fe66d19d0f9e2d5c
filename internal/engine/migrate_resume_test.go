package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// versions returns the versions of ms.
func versions(ms []engine.Migration) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.Version
	}
	return out
}

// newerThan returns the versions of s's migrations newer than v.
func newerThan(t *testing.T, s *engine.Store, v int) []int {
	t.Helper()
	all, err := s.Migrations()
	require.NoError(t, err)
	var out []int
	for _, m := range all {
		if m.Version > v {
			out = append(out, m.Version)
		}
	}
	return out
}

// requireAllApplied checks that s's schema is current and that status
// says every migration is applied whole.
func requireAllApplied(t *testing.T, s *engine.Store) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.CheckSchema(ctx))
	st, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range st {
		require.Equal(t, "applied", m.State(), "%03d_%s", m.Version, m.Name)
	}
}

// A migration that fails part way (here: a table in the way of 013's
// last statement) is not recorded; once the operator removes the cause,
// `migrate up` applies it. PostgreSQL and SQLite roll the whole migration
// back. On MySQL, whose DDL commits at once, the statements before the
// failure stay applied, so the rerun failed on the first of them forever
// ("Duplicate column name"), and status called the migration pending: it
// now says how far the migration got, `migrate down` refuses to revert
// past it, and `migrate up` resumes after the statements that ran.
func TestAMigrationThatFailedPartWayCanBeRunAgain(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			open := testdb.Opener(t, b.URL(t))
			s := open()
			_, err := s.MigrateUp(ctx, 12)
			require.NoError(t, err)
			_, err = s.DB().Exec(ctx, "CREATE TABLE sluice_fair_keys (x INT)")
			require.NoError(t, err)
			_, failed := s.MigrateUp(ctx, 0)
			require.ErrorContains(t, failed, "apply migration 013_fairness: statement")
			st, err := s.MigrationStatus(ctx)
			require.NoError(t, err)
			require.False(t, st[12].Applied, "013 is not recorded")
			if s.SQL().TracksMigrationProgress() {
				require.ErrorContains(t, failed, "once the cause is fixed, `migrate up` resumes at statement 3")
				require.Equal(t, "partly applied: 2 of 3 statements", st[12].State())
				require.ErrorContains(t, s.CheckSchema(ctx), "013_fairness (partly applied: 2 of 3 statements)")
				reverted, err := s.MigrateDown(ctx, 1)
				require.ErrorContains(t, err, "migration 013_fairness is partly applied (2 of 3 statements ran before it failed): run `migrate up` to finish it before reverting")
				require.Empty(t, reverted)
			} else {
				require.Equal(t, "pending", st[12].State(), "the migration's transaction rolled back")
			}

			other := open() // another migrator, as the operator's next `migrate up`
			_, err = other.DB().Exec(ctx, "DROP TABLE sluice_fair_keys")
			require.NoError(t, err)
			done, err := other.MigrateUp(ctx, 0)
			require.NoError(t, err, "migrate up after the cause is removed")
			require.Equal(t, newerThan(t, other, 12), versions(done))
			requireAllApplied(t, other)
		})
	}
}

// The same for a down migration: 014's revert fails at its second
// statement (a generated column depends on the column it drops), and runs
// again once the operator drops that column. On MySQL the first statement
// stays reverted: status says so, `migrate up` refuses to apply past it,
// and `migrate down` resumes at the second.
func TestARevertThatFailedPartWayCanBeRunAgain(t *testing.T) {
	obstacle := map[string]string{
		"mysql":    "ALTER TABLE sluice_budgets ADD COLUMN obstacle INT GENERATED ALWAYS AS (slotted_priority + 1) VIRTUAL",
		"postgres": "ALTER TABLE sluice_budgets ADD COLUMN obstacle int GENERATED ALWAYS AS (slotted_priority + 1) STORED",
		"sqlite":   "ALTER TABLE sluice_budgets ADD COLUMN obstacle INTEGER GENERATED ALWAYS AS (slotted_priority + 1) VIRTUAL",
	}
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.Open(t)
			_, err := s.DB().Exec(ctx, obstacle[b.Name])
			require.NoError(t, err)
			later := newerThan(t, s, 14) // reverted before 014, newest first
			slices.Reverse(later)
			reverted, failed := s.MigrateDown(ctx, len(later)+1)
			require.ErrorContains(t, failed, "revert migration 014_slot_priority: statement 2 of 2")
			require.Equal(t, later, versions(reverted))
			st, err := s.MigrationStatus(ctx)
			require.NoError(t, err)
			if s.SQL().TracksMigrationProgress() {
				require.ErrorContains(t, failed, "once the cause is fixed, `migrate down` resumes at statement 2")
				require.Equal(t, "partly reverted: 1 of 2 statements", st[13].State())
				require.ErrorContains(t, s.CheckSchema(ctx), "014_slot_priority (partly reverted: 1 of 2 statements)")
				applied, err := s.MigrateUp(ctx, 0)
				require.ErrorContains(t, err, "migration 014_slot_priority is partly reverted (1 of 2 statements ran before it failed): run `migrate down` to finish reverting it before applying")
				require.Empty(t, applied)
			} else {
				require.Equal(t, "applied", st[13].State(), "the revert's transaction rolled back")
			}

			_, err = s.DB().Exec(ctx, "ALTER TABLE sluice_budgets DROP COLUMN obstacle")
			require.NoError(t, err)
			reverted, err = s.MigrateDown(ctx, 1)
			require.NoError(t, err, "migrate down after the cause is removed")
			require.Equal(t, []int{14}, versions(reverted))
			done, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, newerThan(t, s, 13), versions(done))
			requireAllApplied(t, s)
		})
	}
}

// The store runs a transaction again after a deadlock. On MySQL a
// migration's DDL commits as it runs, so running the migration's whole
// transaction again ran its committed statements twice, and failed
// ("Duplicate column name"): only the statement that met the deadlock may
// run again.
func TestAMigrationRunAgainAfterADeadlockRunsEachStatementOnce(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.OpenRaw(t)
			_, err := s.MigrateUp(ctx, 12)
			require.NoError(t, err)
			faulty, f := testdb.WithFaults(s)
			f.FailOnce = "CREATE TABLE sluice_fair_keys" // 013's, after a statement that adds columns
			done, err := faulty.MigrateUp(ctx, 0)
			require.NoError(t, err, "migrate up, which meets a deadlock in 013")
			require.Empty(t, f.FailOnce, "the deadlock was met")
			require.Equal(t, newerThan(t, s, 12), versions(done))
			requireAllApplied(t, s)
		})
	}
}
