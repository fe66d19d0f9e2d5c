package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Several replicas of a program that each run `migrate up` as they boot,
// on an empty database: every one succeeds, and each migration is applied
// once.
func TestConcurrentMigratorsOnAnEmptyDatabase(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) { concurrentMigrators(t, b.URL(t)) })
	}
}

// concurrentMigrators runs six migrators at once on the empty database at
// url, each with a pool of its own: every one succeeds, and each
// migration is applied once.
func concurrentMigrators(t *testing.T, url string) {
	ctx := context.Background()
	open := testdb.Opener(t, url)
	const migrators = 6
	stores := make([]*engine.Store, migrators)
	for i := range stores {
		stores[i] = open()
	}
	applied := make([]int, migrators)
	var g errgroup.Group
	for i, s := range stores {
		g.Go(func() error {
			done, err := s.MigrateUp(ctx, 0)
			applied[i] = len(done)
			return err
		})
	}
	require.NoError(t, g.Wait())
	all, err := stores[0].Migrations()
	require.NoError(t, err)
	total := 0
	for _, n := range applied {
		total += n
	}
	require.Equal(t, len(all), total, "each migration is applied by exactly one migrator")
	for _, s := range stores {
		require.NoError(t, s.CheckSchema(ctx))
	}
}
