package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md ("A database a newer sluice migrated"): migrate down
// reverts nothing while a migration newer than this sluice knows is
// applied, since reverting below it "would leave a schema of no version";
// and on MySQL a migration that failed part way keeps its statements that
// ran, recorded in sluice_migration_progress. A newer sluice whose 021
// failed part way (a deploy rolled back after it) leaves 021's first
// statements applied, with no row in sluice_migrations: it counts as
// newer, so status and check name it ("partly applied by a newer
// sluice"), migrate up with nothing of its own pending succeeds, and
// down refuses naming it rather than revert 020 from under it. So does a
// newer migration reverted part way. PostgreSQL and SQLite roll a failed
// migration back whole, so there is nothing under way to see.
func TestANewerMigrationPartlyAppliedOnMySQLCountsAsNewer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		all, err := s.Migrations()
		require.NoError(t, err)
		latest := all[len(all)-1].Version
		if !s.SQL().TracksMigrationProgress() {
			reverted, err := s.MigrateDown(ctx, 1)
			require.NoError(t, err)
			require.Len(t, reverted, 1)
			return
		}
		exec := func(q string, args ...any) {
			t.Helper()
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
		}
		// What a newer sluice's `migrate up` leaves when its 021 fails at
		// statement 2: statement 1 ran (here: a table), and is counted.
		exec("CREATE TABLE sluice_newer_021 (x INT)")
		q, args := s.SQL().SaveMigrationProgress(latest+1, "up", 1)
		exec(q, args...)

		newer, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		reverted, err := s.MigrateDown(ctx, 1)
		assert.Equal(t, []int{latest + 1}, newer, "status and check name the newer migration under way")
		require.ErrorIs(t, err, engine.ErrNewerMigrations, "reverted %v from under a newer migration under way", versions(reverted))
		require.ErrorContains(t, err, fmt.Sprintf("migration %03d is partly applied, and this one's newest is %03d", latest+1, latest))
		require.Empty(t, reverted)
		st, err := s.NewerMigrationStatus(ctx)
		require.NoError(t, err)
		require.Len(t, st, 1)
		require.Equal(t, "partly applied by a newer sluice: 1 statement ran (unknown to this one)", st[0].State())
		done, err := s.MigrateUp(ctx, 0)
		require.NoError(t, err, "nothing of its own is pending: an old replica still boots")
		require.Empty(t, done)

		// The newer sluice finished 021, applied 022 and failed part way
		// reverting it.
		q, args = s.SQL().RecordMigration(latest+1, "from_the_future", engine.Micros(t0))
		exec(q, args...)
		q, args = s.SQL().ClearMigrationProgress(latest + 1)
		exec(q, args...)
		q, args = s.SQL().RecordMigration(latest+2, "further", engine.Micros(t0))
		exec(q, args...)
		q, args = s.SQL().SaveMigrationProgress(latest+2, "down", 2)
		exec(q, args...)
		st, err = s.NewerMigrationStatus(ctx)
		require.NoError(t, err)
		require.Len(t, st, 2)
		require.Equal(t, "applied by a newer sluice (unknown to this one)", st[0].State())
		require.Equal(t, "partly reverted by a newer sluice: 2 statements ran (unknown to this one)", st[1].State())
		_, err = s.MigrateDown(ctx, 1)
		require.ErrorIs(t, err, engine.ErrNewerMigrations)
		require.ErrorContains(t, err, fmt.Sprintf("migration %03d is applied, migration %03d is partly reverted", latest+1, latest+2))
		require.Equal(t, fmt.Sprintf("migration %03d applied, migration %03d partly reverted", latest+1, latest+2), engine.NewerList(st, true))
		require.Contains(t, appliedVersions(t, s), latest)
	})
}
