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

// The database sorts budget and semaphore keys as sluice does, bytewise: a
// transaction decides in Go which keys sort after the ones it holds, and
// locks them in statements that sort them in the database. Under a
// linguistic collation "k_a" sorts before "k/b" and "acme" before "Acme",
// the reverse of Go's order, and a transaction could then wait out of the
// order others lock in. The keys here differ in exactly those ways.
func TestKeysAreLockedInTheOrderSluiceSortsThem(t *testing.T) {
	keys := []string{"k_a", "k/b", "acme", "Acme", "k/é", "k/z", "K", "k-c"}
	want := slices.Sorted(slices.Values(keys))
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, table := range []struct {
			insert, lock func([]string) (string, []any)
			columns      string
		}{
			{s.SQL().InsertBudgets, s.SQL().LockBudgets, engine.BudgetColumns},
			{s.SQL().InsertSemaphores, s.SQL().LockSemaphores, engine.SemaphoreColumns},
		} {
			q, args := table.insert(want)
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
			q, args = table.lock(keys)
			rows, err := s.DB().Query(ctx, q, args...)
			require.NoError(t, err)
			var got []string
			for rows.Next() {
				dest := make([]any, strings.Count(table.columns, ",")+1)
				var name string
				dest[0] = &name
				for i := 1; i < len(dest); i++ {
					dest[i] = new(any)
				}
				require.NoError(t, rows.Scan(dest...))
				got = append(got, name)
			}
			rows.Close()
			require.NoError(t, rows.Err())
			require.Equal(t, want, got)
		}
		if s.Dialect().Name() != "postgres" {
			return // utf8mb4_bin and BINARY columns, from their first migration
		}
		// This database's default collation is C.UTF-8, which sorts as C
		// does: the columns must say so whatever the default.
		for _, col := range [][2]string{{"sluice_budgets", "name"}, {"sluice_semaphores", "name"}, {"sluice_fair_keys", "fair_key"}} {
			rows, err := s.DB().Query(ctx, `SELECT collation_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2`, col[0], col[1])
			require.NoError(t, err)
			var collation *string
			for rows.Next() {
				require.NoError(t, rows.Scan(&collation))
			}
			rows.Close()
			require.NotNil(t, collation, "%s.%s", col[0], col[1])
			require.Equal(t, "C", *collation, "%s.%s", col[0], col[1])
		}
	})
}
