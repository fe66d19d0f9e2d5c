package engine_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// The migrations whose revert drops no data (those
// of indexes and generated columns, 007 to 010, 015, 016, 018 to 020),
// reverted and applied again one at a time from the newest on a database
// populated with every kind of job and row (populate), keep every row of
// every table, every column. (The others drop the columns and tables of
// their feature, with what they held; sluice_coalesce_keys holds only key
// rows, which the next call of a key creates again.)
func TestRoundTripOfEachMigrationThatDropsNoDataKeepsEveryRow(t *testing.T) {
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

// dumpTables reads every row of every sluice_ table but the migrator's,
// each row as "col=value ..." with its columns in name order, the rows
// sorted: what a round trip of migrations is compared by.
func dumpTables(t *testing.T, s *engine.Store) map[string][]string {
	t.Helper()
	ctx := context.Background()
	var tablesQ, colsQ string
	switch s.Dialect().Name() {
	case "postgres":
		tablesQ = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'sluice%'"
		colsQ = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = '%s'"
	case "mysql":
		tablesQ = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'sluice%'"
		colsQ = "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = '%s'"
	default:
		tablesQ = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sluice%'"
		colsQ = "SELECT name FROM pragma_table_info('%s')"
	}
	strs := func(q string) []string {
		rows, err := s.DB().Query(ctx, q)
		require.NoError(t, err, q)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var v string
			require.NoError(t, rows.Scan(&v))
			out = append(out, v)
		}
		require.NoError(t, rows.Err())
		return out
	}
	out := map[string][]string{}
	for _, table := range strs(tablesQ) {
		if strings.HasPrefix(table, "sluice_migration") {
			continue
		}
		cols := strs(fmt.Sprintf(colsQ, table))
		sort.Strings(cols)
		exprs := make([]string, len(cols))
		for i, c := range cols {
			exprs[i] = fmt.Sprintf("COALESCE(CAST(%s AS %s), 'NULL')", c, map[string]string{"mysql": "CHAR"}[s.Dialect().Name()]+map[bool]string{true: "TEXT"}[s.Dialect().Name() != "mysql"])
		}
		q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + table
		rows, err := s.DB().Query(ctx, q)
		require.NoError(t, err, q)
		var lines []string
		for rows.Next() {
			vals := make([]string, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			parts := make([]string, len(cols))
			for i, c := range cols {
				parts[i] = c + "=" + vals[i]
			}
			lines = append(lines, strings.Join(parts, " "))
		}
		require.NoError(t, rows.Err())
		rows.Close()
		sort.Strings(lines)
		out[table] = lines
	}
	return out
}
