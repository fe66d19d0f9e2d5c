package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Every statement of the catalog renders for every dialect (and each
// PostgreSQL option) in that database's spelling, with as many
// placeholders as arguments.
func TestCatalogRendersForEveryDialect(t *testing.T) {
	dialects := []engine.Dialect{postgres.Dialect{}, postgres.Dialect{NoNotify: true, NoAdvisoryLock: true}, mysql.Dialect{}, sqlite.Dialect{}}
	for _, d := range dialects {
		c := d.Capabilities()
		testdb.EachStatement(t, d, func(name, text string, args []any) {
			if text == "" {
				return
			}
			for _, leftover := range []string{"{", "}", " :"} {
				require.NotContains(t, text, leftover, "%s %s", d.Name(), name)
			}
			if c.Arrays {
				return
			}
			require.NotContains(t, text, "::", "%s %s: casts are PostgreSQL's", d.Name(), name)
			require.NotContains(t, text, "TRUE", "%s %s", d.Name(), name)
			require.Equal(t, len(args), strings.Count(text, "?"), "%s %s: placeholders and arguments", d.Name(), name)
			if !c.RowLocks {
				require.NotContains(t, text, "FOR UPDATE", "%s %s", d.Name(), name)
			}
			if c.DuplicateKey {
				require.NotContains(t, text, "ON CONFLICT", "%s %s", d.Name(), name)
				require.NotContains(t, text, "EXCLUDED", "%s %s", d.Name(), name)
			}
			if !c.Returning {
				require.NotContains(t, text, "RETURNING", "%s %s", d.Name(), name)
			}
		})
	}
}

// A queue's ready jobs are counted together, with and without rate
// limits, though each kind is read through its own index.
func TestDepthCountsReadyJobsWithAndWithoutLimits(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		enqueue(t, s, t0, job("a", "default", 0), limited("b", "b/1"), limited("b", "b/2"))
		depth, err := s.Depth(context.Background())
		require.NoError(t, err)
		require.Len(t, depth, 1)
		require.Equal(t, map[engine.State]int64{engine.StateReady: 3}, depth[0].Counts)
	})
}

// progressDialect is SQLite's dialect with statements of its own added.
type progressDialect struct {
	sqlite.Dialect
	more string
}

func (d progressDialect) Replacements() string { return d.Dialect.Replacements() + d.more }

// A dialect that records migration progress runs migrations a statement
// at a time, in transactions of their own: it needs every statement of
// the progress and a lock that outlives a transaction, and a lock taken
// needs its release. NewSQL refuses a dialect with part of them.
func TestCatalogRefusesPartOfTheMigrationProgressOrLock(t *testing.T) {
	for _, more := range []string{
		"\n-- name: MigrationProgress\nSELECT version, direction, statements FROM p;\n",
		"\n-- name: TakeMigrationLock\nSELECT GET_LOCK('x', :timeout);\n",
	} {
		_, err := engine.NewSQL(progressDialect{more: more})
		require.Error(t, err, more)
	}
}
