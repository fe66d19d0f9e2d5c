package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// Regression (passes): the migrations whose revert drops no data (those
// of indexes and generated columns, 007 to 010, 015, 016, 018 to 020),
// reverted and applied again one at a time from the newest on a database
// populated with every kind of job and row (populate), keep every row of
// every table, every column. (The others drop the columns and tables of
// their feature, with what they held; sluice_coalesce_keys holds only key
// rows, which the next call of a key creates again.)
func TestReviewRoundTripOfEachMigrationThatDropsNoDataKeepsEveryRow(t *testing.T) {
	keeps := map[int]bool{7: true, 8: true, 9: true, 10: true, 15: true, 16: true, 18: true, 19: true, 20: true}
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
				if keeps[v] {
					after := dumpTables(t, s)
					delete(before, "sluice_coalesce_keys")
					delete(after, "sluice_coalesce_keys")
					require.Equal(t, before, after, "after a revert and re-apply of %03d", v)
				}
				_, err = s.MigrateDown(ctx, 1)
				require.NoError(t, err)
			}
		})
	}
}

// docs/operations.md ("A database a newer sluice migrated"): migrate down
// reverts nothing while a migration newer than this sluice knows is
// applied, since reverting below it "would leave a schema of no version";
// and on MySQL a migration that failed part way keeps its statements that
// ran, recorded in sluice_migration_progress. A newer sluice whose 021
// failed part way (a deploy rolled back after it) leaves 021's first
// statements applied: this sluice's status said nothing of it (only
// versions it knows, and newer ones recorded whole), and migrate down
// reverted 020 from under them. A newer migration under way counts as
// newer: down refuses naming it. PostgreSQL and SQLite roll a failed
// migration back whole, so there is nothing under way to see.
func TestReviewANewerMigrationPartlyAppliedOnMySQLCountsAsNewer(t *testing.T) {
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
		// What a newer sluice's `migrate up` leaves when its 021 fails at
		// statement 2: statement 1 ran (here: a table), and is counted.
		_, err = s.DB().Exec(ctx, "CREATE TABLE sluice_newer_021 (x INT)")
		require.NoError(t, err)
		_, err = s.DB().Exec(ctx, fmt.Sprintf("INSERT INTO sluice_migration_progress (version, direction, statements) VALUES (%d, 'up', 1)", latest+1))
		require.NoError(t, err)

		newer, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		reverted, err := s.MigrateDown(ctx, 1)
		assert.Equal(t, []int{latest + 1}, newer, "status and check name the newer migration under way")
		require.ErrorIs(t, err, engine.ErrNewerMigrations, "reverted %v from under a newer migration under way", versions(reverted))
		require.Empty(t, reverted)
	})
}

// Regression (passes): a pending job that collected calls, a blocked job
// and a paused queue survive a revert and a re-apply of the newest
// migrations (015 to 020: fair priorities, parked fair jobs, claims,
// waiting fair jobs, delayed jobs, coalesce keys) and work after it: the
// next call of the key joins the same job, whose claim brings every call;
// the blocked job takes the slot its holder gives back; the queue is still
// paused.
func TestReviewCoalescingAndBlockedJobsWorkAfterARoundTripOfTheNewestMigrations(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pending := collected(t, s, "shop", 3)
		conc := func() engine.NewJob {
			j := job("conc", "default", 0)
			j.Conc = &engine.Conc{Key: "conc/one", To: 1, Duration: 3 * time.Minute}
			return j
		}
		holder := enqueue(t, s, t0, conc())[0]
		blocked := enqueue(t, s, t0, conc())[0]
		require.Equal(t, engine.StateBlocked, state(t, s, blocked).State)
		require.NoError(t, s.PauseQueue(ctx, "paused", t0))

		reverted, err := s.MigrateDown(ctx, 6)
		require.NoError(t, err)
		require.Len(t, reverted, 6)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)

		require.Equal(t, pending, collected(t, s, "shop", 1), "the next call joins the pending job")
		require.Equal(t, 3, calls(t, s, pending))
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 10)
		require.ElementsMatch(t, []int64{pending, holder}, ids(res.Jobs))
		for _, j := range res.Jobs {
			if j.ID == pending {
				require.Len(t, j.CallArgs, 4, "every call reaches the handler")
			}
		}
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, holder), SlotHolders: runs(t, s, holder)}))
		require.Equal(t, engine.StateReady, state(t, s, blocked).State, "the blocked job took the slot")
		qs, err := s.ListQueues(ctx)
		require.NoError(t, err)
		require.Contains(t, qs, engine.QueueInfo{Name: "paused", Paused: true})
	})
}

// docs/operations.md, Several migrators at once: "A migrator that finds
// nothing to do returns without waiting for the lock" (and "A database a
// newer sluice migrated": old replicas still boot while the newer one
// migrates). Here another migrator holds the lock in the middle of its
// run (PostgreSQL: the advisory lock in its transaction; SQLite: the
// write lock its BEGIN IMMEDIATE took; MySQL: the named lock) while a
// migrator with nothing to do runs migrate up.
func TestReviewAMigratorWithNothingToDoDoesNotWaitForTheLockOnAnyDatabase(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		holder := open()
		switch {
		case holder.SQL().SessionLock():
			holdMigrationLock(t, holder)
		default:
			tx, err := holder.DB().Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if q := holder.SQL().LockMigrations(); q != "" {
				_, err = tx.Exec(ctx, q)
			} else {
				// BEGIN IMMEDIATE holds the write lock; a migration's first
				// write makes sure of it.
				_, err = tx.Exec(ctx, "CREATE TABLE sluice_review_holder (x INTEGER)")
			}
			require.NoError(t, err)
		}
		other := open()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		began := time.Now()
		done, err := other.MigrateUp(cctx, 0)
		require.NoError(t, err, "after %v", time.Since(began))
		require.Empty(t, done)
		require.Less(t, time.Since(began), 2*time.Second, "a migrator with nothing to do does not wait for the lock")
	})
}
