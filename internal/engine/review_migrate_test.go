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

// docs/operations.md: "Reverting 020 on MySQL fails while two jobs hold one
// coalesce key" (an enqueuer of the version before 020 may make them while
// a deploy rolls). The migration's own comment says what to do ("cancel one
// first"), but the comment is not part of the statement, so the operator
// saw only MySQL's "Duplicate entry ... for key 'sluice_jobs_coalesce'":
// the error must say which key is held twice and what to do. On
// PostgreSQL and SQLite the index stays unique from 004 on, so no two jobs
// can hold a key and the revert works.
func TestReviewRevertingCoalesceKeysWithTwoJobsOfOneKeySaysWhatToDo(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		co := func(k string) engine.NewJob {
			j := job("co", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: k, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return j
		}
		first := enqueue(t, s, t0, co("co/shop-1"))[0]
		second := enqueue(t, s, t0, co("co/shop-2"))[0]
		// What an enqueuer of the version before 020 may leave on MySQL:
		// two pending jobs of one key.
		_, dup := s.DB().Exec(ctx, fmt.Sprintf("UPDATE sluice_jobs SET coalesce_key = 'co/shop-1' WHERE id = %d", second))
		if !s.Dialect().Capabilities().IndexLocks {
			require.Error(t, dup, "the coalesce index is unique")
			reverted, err := s.MigrateDown(ctx, 1)
			require.NoError(t, err)
			require.Len(t, reverted, 1)
			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			return
		}
		require.NoError(t, dup)
		reverted, err := s.MigrateDown(ctx, 1)
		require.Error(t, err, "two jobs hold co/shop-1")
		require.Empty(t, reverted)
		st, serr := s.MigrationStatus(ctx)
		require.NoError(t, serr)
		require.Equal(t, "applied", st[len(st)-1].State(), "nothing of 020 was reverted")
		assert.ErrorContains(t, err, "cancel", "the error says what to do: %v", err)

		_, err = s.CancelJobs(ctx, engine.At(t0), []int64{second}, "duplicate")
		require.NoError(t, err)
		reverted, err = s.MigrateDown(ctx, 1)
		require.NoError(t, err, "after one of the two is cancelled")
		require.Len(t, reverted, 1)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, first).State)
	})
}

// Probe: every migration reverted and applied again, one at a time from
// the newest, on a database populated with every kind of job and row
// (populate): each table's rows, every column, after the round trip of v
// against before it.
func TestReviewProbeRoundTripOfEachMigrationKeepsEveryRow(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.Open(t)
			populate(t, s)
			all, err := s.Migrations()
			require.NoError(t, err)
			for v := len(all); v > 1; v-- {
				before := dumpTables(t, s)
				_, err := s.MigrateDown(ctx, 1)
				require.NoError(t, err, "revert %03d", v)
				_, err = s.MigrateUp(ctx, v)
				require.NoError(t, err, "apply %03d again", v)
				after := dumpTables(t, s)
				for table, rows := range before {
					if !assert.Equal(t, rows, after[table], "%03d: %s", v, table) {
						t.Logf("%03d %s", v, table)
					}
				}
				_, err = s.MigrateDown(ctx, 1)
				require.NoError(t, err)
			}
		})
	}
}
