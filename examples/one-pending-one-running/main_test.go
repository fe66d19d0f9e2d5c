package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

func TestOnePendingAndOneRunningPerShopUnderOneQuota(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Equal(t, 80, r.Requests)
		require.LessOrEqual(t, r.Busiest, 2, "the quota holds")
		// 2 a second for 10 s, and never more than one pending per shop.
		require.LessOrEqual(t, r.Syncs, 21)
		require.Equal(t, r.Requests, r.Joined+r.Syncs+pending(t, s), "every request ran, joined, or waits")
	})
}

func pending(t *testing.T, s *engine.Store) int {
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	n := 0
	for _, q := range st {
		for _, state := range []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked} {
			n += int(q.Counts[state])
		}
	}
	return n
}
