package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestBurstCoveringThePollsKeepsUp(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *store.Store) {
		perSecond, err := run(context.Background(), s, 6)
		require.NoError(t, err)
		require.Equal(t, []int{6, 5, 5, 5, 5, 5, 5, 5, 5, 5}, perSecond)
	})
}

func TestABurstTooSmallForThePollsFallsBehind(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *store.Store) {
		perSecond, err := run(context.Background(), s, 2)
		require.NoError(t, err)
		require.Equal(t, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, perSecond, "9 a second allowed, 2 a second drained")
	})
}
