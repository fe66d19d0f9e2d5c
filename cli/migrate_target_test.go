package cli_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: "Negative durations and counts are refused, naming
// the flag (or field)"; a refused command applies nothing. `migrate up
// --to -1`, and a --to that is no migration's version, applied every
// migration.
func TestMigrateUpToAVersionThatIsNoneIsRefused(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := "--database-url=" + url
			for _, to := range []string{"-1", "999"} {
				code, _, stderr := run(t, "migrate", "up", "--to", to, db)
				st, err := testdb.Opener(t, url)().MigrationStatus(context.Background())
				require.NoError(t, err)
				applied := 0
				for _, m := range st {
					if m.Applied {
						applied++
					}
				}
				require.Equal(t, 2, code, "migrate up --to %s exited %d (stderr %q) and applied %d migrations", to, code, stderr, applied)
				require.Contains(t, stderr, "--to")
				require.Zero(t, applied)
			}
			_, err := testdb.Opener(t, url)().MigrateUp(context.Background(), 999)
			require.ErrorContains(t, err, "no migration has version 999")
		})
	}
}

// docs/operations.md: migrate down reverts the newest, migrate up applies
// the pending ones; the jobs survive a down and up of the fairness
// migrations (013, 014) on every database.
func TestMigrateDownAndUpKeepsFairAndPlainJobs(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := "--database-url=" + url
			code, _, stderr := run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			s := testdb.Opener(t, url)()
			fair := engine.NewJob{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, FairKey: "tenant", FairWeight: 1}
			plain := engine.NewJob{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}
			_, err := s.Enqueue(context.Background(), nil, engine.At(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), []engine.NewJob{fair, plain, fair})
			require.NoError(t, err)
			code, _, stderr = run(t, "migrate", "down", "2", db)
			require.Equal(t, 0, code, stderr)
			code, _, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			s2 := testdb.Opener(t, url)()
			stats, err := s2.Stats(context.Background())
			require.NoError(t, err)
			require.Len(t, stats, 1)
			require.Equal(t, int64(3), stats[0].Counts[engine.StateReady], "%v", stats)
		})
	}
}

// migrate down N with N above the migrations applied is refused, reverting
// nothing: a typo (down 99 for down 9) would revert them all and drop every
// job. Reverting exactly all of them is still possible, by saying so.
func TestMigrateDownOfMoreThanAreAppliedIsRefused(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := "--database-url=" + url
			code, _, stderr := run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			applied := func() int {
				st, err := testdb.Opener(t, url)().MigrationStatus(context.Background())
				require.NoError(t, err)
				n := 0
				for _, m := range st {
					if m.Applied {
						n++
					}
				}
				return n
			}
			all := applied()
			code, _, stderr = run(t, "migrate", "down", "99", db)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, fmt.Sprintf("only %d migration(s) are applied", all))
			require.Equal(t, all, applied(), "a refused down reverts nothing")

			code, _, stderr = run(t, "migrate", "down", strconv.Itoa(all), db)
			require.Equal(t, 0, code, stderr)
			require.Zero(t, applied())
			code, out, stderr := run(t, "migrate", "down", "3", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "nothing to revert")
		})
	}
}
