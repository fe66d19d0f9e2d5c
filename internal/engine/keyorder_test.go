package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Budgets, semaphores and fair keys are locked in byte order, as sluice
// sorts keys in Go to decide which sort after the ones a transaction holds,
// whatever the collation of their columns: under a linguistic one "k_a"
// sorts before "k/b" and "acme" before "Acme", the reverse of Go's order,
// and a transaction could then wait out of the order others lock in. On
// PostgreSQL the test gives the key columns such a collation first (a
// database created under en_US.UTF-8 has it by default); MySQL's columns
// are utf8mb4_bin and SQLite's BINARY.
func TestKeysAreLockedInTheOrderSluiceSortsThem(t *testing.T) {
	keys := []string{"k_a", "k/b", "acme", "Acme", "k/é", "k/z", "K", "k-c"}
	want := slices.Sorted(slices.Values(keys))
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		if s.Dialect().Name() == "postgres" {
			for _, q := range []string{
				`ALTER TABLE sluice_budgets ALTER COLUMN name TYPE text COLLATE "en-US-x-icu"`,
				`ALTER TABLE sluice_semaphores ALTER COLUMN name TYPE text COLLATE "en-US-x-icu"`,
				`ALTER TABLE sluice_fair_keys ALTER COLUMN fair_key TYPE text COLLATE "en-US-x-icu"`,
			} {
				_, err := s.DB().Exec(ctx, q)
				require.NoError(t, err)
			}
		}
		fair := func(f func(string, int, []string) (string, []any)) func([]string) (string, []any) {
			return func(keys []string) (string, []any) { return f("default", 0, keys) }
		}
		columns := func(list string) int { return strings.Count(list, ",") + 1 }
		for _, table := range []struct {
			name         string
			insert, lock func([]string) (string, []any)
			columns      int
		}{
			{"budgets", s.SQL().InsertBudgets, s.SQL().LockBudgets, columns(engine.BudgetColumns)},
			{"semaphores", s.SQL().InsertSemaphores, s.SQL().LockSemaphores, columns(engine.SemaphoreColumns)},
			{"free semaphores", s.SQL().InsertSemaphores, s.SQL().LockFreeSemaphores, columns(engine.SemaphoreColumns)},
			{"fair keys", fair(s.SQL().InsertFairKeys), fair(s.SQL().LockFairKeys), 2},
		} {
			q, args := table.insert(want)
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
			tx, err := s.DB().Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			q, args = table.lock(keys)
			rows, err := tx.Query(ctx, q, args...)
			require.NoError(t, err)
			var got []string
			for rows.Next() {
				// The key is each statement's first column.
				var name string
				dest := []any{&name}
				for range table.columns - 1 {
					dest = append(dest, new(any))
				}
				require.NoError(t, rows.Scan(dest...))
				got = append(got, name)
			}
			rows.Close()
			require.NoError(t, rows.Err())
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, want, got, table.name)
		}
	})
}
