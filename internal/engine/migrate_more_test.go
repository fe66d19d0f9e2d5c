package engine_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// holdAnyMigrationLock holds b's migration lock the way a migrator in the
// middle of a migration holds it, and returns what releases it and a
// function that counts the migrators waiting for it. Only PostgreSQL
// (advisory lock) and MySQL (named lock) have a lock another connection
// can be seen waiting for; the test skips elsewhere.
func holdAnyMigrationLock(t *testing.T, s *engine.Store) (release func(), waiting func() int) {
	t.Helper()
	ctx := context.Background()
	switch s.Dialect().Name() {
	case "mysql":
		release = holdMigrationLock(t, s)
		waiting = func() int {
			n, err := countRows(ctx, s, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%' AND DB = DATABASE()")
			require.NoError(t, err)
			return n
		}
		return release, waiting
	case "postgres":
		q := s.SQL().LockMigrations()
		require.Contains(t, q, "pg_advisory_xact_lock")
		tx, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, q)
		require.NoError(t, err)
		var once sync.Once
		release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
		t.Cleanup(release)
		waiting = func() int {
			n, err := countRows(ctx, s, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
			require.NoError(t, err)
			return n
		}
		return release, waiting
	}
	t.Skipf("%s: no migration lock another connection can wait for", s.Dialect().Name())
	return nil, nil
}

func countRows(ctx context.Context, s *engine.Store, q string) (int, error) {
	rows, err := s.DB().Query(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// waitFor polls cond (a synchronization point: the migrators are parked
// on the lock, not a time the test needs to pass).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func appliedVersions(t *testing.T, s *engine.Store) []int {
	t.Helper()
	st, err := s.MigrationStatus(context.Background())
	require.NoError(t, err)
	var out []int
	for _, m := range st {
		if m.Applied {
			out = append(out, m.Version)
		}
	}
	sort.Ints(out)
	return out
}

// operations.md, "Several migrators at once": "one applies the migrations
// while the others wait for the database's migration lock, and then find
// nothing left to do"; `sluice migrate down` "revert[s] the newest" and
// `migrate down N` "the N newest". Two operators (or a rollback script run
// from two replicas) who each say `migrate down 1` at once mean "the
// release before this one": the newest migration must be reverted once.
// MigrateDown chooses what to revert before it takes the lock; the second
// migrator, finding 017 already reverted under the lock, goes on to
// revert 016 too, and the database ends two versions down.
func TestTwoMigratorsRevertingOneEachRevertOnlyTheNewest(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			open := testdb.Opener(t, b.URL(t))
			s := open()
			_, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			latest, err := s.LatestVersion()
			require.NoError(t, err)

			release, waiting := holdAnyMigrationLock(t, s)
			type result struct {
				done []engine.Migration
				err  error
			}
			results := make(chan result, 2)
			for range 2 {
				m := open()
				go func() {
					done, err := m.MigrateDown(ctx, 1)
					results <- result{done, err}
				}()
			}
			waitFor(t, "both migrators to wait for the lock", func() bool { return waiting() >= 2 })
			release()
			var reverted []string
			for range 2 {
				r := <-results
				require.NoError(t, r.err)
				for _, m := range r.done {
					reverted = append(reverted, fmt.Sprintf("%03d_%s", m.Version, m.Name))
				}
			}
			applied := appliedVersions(t, s)
			require.Equal(t, latest-1, applied[len(applied)-1],
				"two `migrate down 1` run at once reverted %v: the database is now at %d, not %d", reverted, applied[len(applied)-1], latest-1)
		})
	}
}

// The same race between a rollout's `migrate up` and an operator's
// `migrate down`: the down migrator picks the newest applied migration
// (016, the database being at 016) before the lock, waits while `up`
// applies 017, and then reverts 016 from under the applied 017 — a
// schema that is neither version (016's index gone while 017 stays
// recorded). Whatever order they take the lock in, the migrations
// applied must stay a prefix 1..N.
func TestUpAndDownAtOnceLeaveAPrefixApplied(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			open := testdb.Opener(t, b.URL(t))
			s := open()
			latest, err := s.LatestVersion()
			require.NoError(t, err)
			_, err = s.MigrateUp(ctx, latest-1)
			require.NoError(t, err)

			release, waiting := holdAnyMigrationLock(t, s)
			upErr := make(chan error, 1)
			downErr := make(chan error, 1)
			up, down := open(), open()
			go func() { _, err := up.MigrateUp(ctx, 0); upErr <- err }()
			waitFor(t, "the up migrator to wait for the lock", func() bool { return waiting() >= 1 })
			go func() { _, err := down.MigrateDown(ctx, 1); downErr <- err }()
			waitFor(t, "the down migrator to wait for the lock", func() bool { return waiting() >= 2 })
			release()
			require.NoError(t, <-upErr)
			require.NoError(t, <-downErr)
			applied := appliedVersions(t, s)
			for i, v := range applied {
				require.Equal(t, i+1, v, "applied migrations %v are not a prefix: one below the newest applied was reverted", applied)
			}
		})
	}
}

// A database migrated by a newer sluice (a version this binary does not
// know is recorded in sluice_migrations) must not be reverted from under
// it by an older binary: `migrate down` "revert[s] the newest", and the
// newest applied is one this binary cannot revert. Here the store
// reverts its own newest (017) while 018 stays recorded as applied.
func TestMigrateDownRefusesADatabaseOfANewerVersion(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		latest, err := s.LatestVersion()
		require.NoError(t, err)
		q, args := s.SQL().RecordMigration(latest+1, "from_the_future", engine.Micros(t0))
		_, err = s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)

		done, err := s.MigrateDown(ctx, 1)
		var names []string
		for _, m := range done {
			names = append(names, fmt.Sprintf("%03d_%s", m.Version, m.Name))
		}
		require.Error(t, err, "migrate down 1 on a database at version %d reverted %v, leaving %d applied above it", latest+1, names, latest+1)
		require.Empty(t, done)
	})
}

// A down-then-up round trip on a jobs table holding many rows (a
// few thousand waiting and finished jobs) keeps every job and its state.
func TestMigrateDownAndUpKeepsManyJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		var batch []engine.NewJob
		for i := range 3000 {
			j := job("bulk", fmt.Sprint("q", i%3), i%5)
			batch = append(batch, j)
		}
		enqueue(t, s, t0, batch...)
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 100, "q0")
		before := snapshotAll(t, s)
		latest, err := s.LatestVersion()
		require.NoError(t, err)
		_, err = s.MigrateDown(ctx, latest-2)
		require.NoError(t, err)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		require.NoError(t, s.CheckSchema(ctx))
		require.Equal(t, before, snapshotAll(t, s))
	})
}

func snapshotAll(t *testing.T, s *engine.Store) map[int64]string {
	t.Helper()
	all, err := s.ListJobs(context.Background(), engine.JobFilter{Limit: 10000})
	require.NoError(t, err)
	out := map[int64]string{}
	for _, j := range all {
		out[j.ID] = fmt.Sprintf("%s %s %s %d attempt=%d", j.Kind, j.Queue, j.State, j.Priority, j.Attempt)
	}
	return out
}

// Migrators at once (operations.md "Every replica may run `migrate up` as it
// boots: one applies the migrations while the others wait … and then find
// nothing left to do"): four migrators started at once on an empty
// database all succeed, and between them apply each migration once.
func TestFourMigratorsAtOnceOnAnEmptyDatabase(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			open := testdb.Opener(t, b.URL(t))
			var stores []*engine.Store
			for range 4 {
				stores = append(stores, open())
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			applied := map[int]int{}
			var errs []error
			for _, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					done, err := s.MigrateUp(ctx, 0)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					}
					for _, m := range done {
						applied[m.Version]++
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs)
			all, err := stores[0].Migrations()
			require.NoError(t, err)
			for _, m := range all {
				require.Equal(t, 1, applied[m.Version], "migration %03d applied %d times", m.Version, applied[m.Version])
			}
			require.NoError(t, stores[0].CheckSchema(ctx))
		})
	}
}
