package main

import (
	"context"
	"github.com/sluicequeue/sluice/internal/engine"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestOnePendingAndOneRunningPerShopUnderOneQuota(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		r, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Equal(t, 80, r.Requests)
		require.LessOrEqual(t, r.Busiest, 2, "the quota holds")
		// 2 a second for 10 s, and never more than one pending per shop.
		require.LessOrEqual(t, r.Syncs, 21)
		require.Equal(t, r.Requests, r.Joined+r.Syncs+pending(t, s), "every request ran, joined, or waits")
	})
}

func pending(t *testing.T, s *store.Store) int {
	st, err := engine.From(s).Stats(context.Background())
	require.NoError(t, err)
	n := 0
	for _, q := range st {
		for _, state := range []store.State{store.StateReady, store.StateScheduled, store.StateParked, store.StateBlocked} {
			n += int(q.Counts[state])
		}
	}
	return n
}
