package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestTheQuietTenantRunsBesideTheFlood(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ran, err := run(ctx, s, 200, 20)
		require.NoError(t, err)
		require.Len(t, ran, 220)
		// Half of each of the first four windows of 10, not after the flood.
		last := -1
		for i, tenant := range ran {
			if tenant == "interactive" {
				last = i
			}
		}
		require.Less(t, last, 40, "the quiet tenant's last job ran at %d: %q", last, ran[:50])
		lines := shares(ran)
		require.Contains(t, lines[0], "bulk  50%, interactive  50%")
	})
}
