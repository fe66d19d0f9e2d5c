package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: reverting 020 on MySQL is refused while two jobs
// hold one coalesce key (an enqueuer of the version before 020 may make
// them while a deploy rolls), since the revert makes the coalesce index
// unique again, which MySQL would refuse with a bare "Duplicate entry".
// The refusal comes before anything of 020 runs, names each key held
// twice with its jobs, and says to cancel all but one of them; once that
// is done the revert works. On PostgreSQL and SQLite the index stays
// unique from 004 on, so no two jobs can hold a key and the revert works.
func TestRevertingMigration020WhileTwoJobsHoldOneCoalesceKeySaysWhatToDo(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		co := func(k string) engine.NewJob {
			j := job("co", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: k, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return j
		}
		var ids []int64
		for _, k := range []string{"co/shop-1", "co/shop-2", "co/shop-3", "co/shop-4", "co/shop-5"} {
			ids = append(ids, enqueue(t, s, t0, co(k))[0])
		}
		// What an enqueuer of the version before 020 may leave on MySQL:
		// two pending jobs of one key (here of two keys).
		_, dup := s.DB().Exec(ctx, fmt.Sprintf("UPDATE sluice_jobs SET coalesce_key = 'co/shop-1' WHERE id = %d", ids[1]))
		if s.Dialect().Name() != "mysql" {
			require.Error(t, dup, "the coalesce index is unique")
			reverted, err := s.MigrateDown(ctx, 1)
			require.NoError(t, err)
			require.Len(t, reverted, 1)
			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			return
		}
		require.NoError(t, dup)
		_, err := s.DB().Exec(ctx, fmt.Sprintf("UPDATE sluice_jobs SET coalesce_key = 'co/shop-3' WHERE id = %d", ids[3]))
		require.NoError(t, err)
		reverted, err := s.MigrateDown(ctx, 1)
		require.Error(t, err, "two jobs hold co/shop-1")
		require.Empty(t, reverted)
		st, serr := s.MigrationStatus(ctx)
		require.NoError(t, serr)
		require.Equal(t, "applied", st[len(st)-1].State(), "nothing of 020 was reverted")
		assert.ErrorContains(t, err, fmt.Sprintf(`"co/shop-1" (jobs %d, %d), "co/shop-3" (jobs %d, %d)`, ids[0], ids[1], ids[2], ids[3]))
		assert.ErrorContains(t, err, "cancel all but one of each key's jobs (`sluice cancel ID...`")
		assert.NotContains(t, err.Error(), "Duplicate entry", "refused before the statement")

		_, err = s.CancelJobs(ctx, engine.At(t0), []int64{ids[1]}, "duplicate")
		require.NoError(t, err)
		_, err = s.MigrateDown(ctx, 1)
		require.ErrorContains(t, err, fmt.Sprintf(`holds coalesce key "co/shop-3" (jobs %d, %d), which`, ids[2], ids[3]), "co/shop-1 is held once now")
		_, err = s.CancelJobs(ctx, engine.At(t0), []int64{ids[3]}, "duplicate")
		require.NoError(t, err)
		reverted, err = s.MigrateDown(ctx, 1)
		require.NoError(t, err, "after all but one of each key's jobs are cancelled")
		require.Len(t, reverted, 1)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, ids[0]).State)
		require.Equal(t, engine.StateReady, state(t, s, ids[2]).State)
	})
}
