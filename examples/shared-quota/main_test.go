package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestOneQuotaForSeveralKinds(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		perMinute, byKind, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Equal(t, []int{100, 91}, perMinute, "the two kinds share one budget")
		require.Equal(t, 191, byKind["sync"]+byKind["refund"])
		require.Greater(t, byKind["refund"], 50, "both kinds get through")
	})
}
