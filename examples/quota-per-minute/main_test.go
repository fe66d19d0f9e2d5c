package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestQuotaPerMinute(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		perMinute, busiest, err := run(context.Background(), s)
		require.NoError(t, err)
		// 10 at once, then one every 60/91 s: 100 in the first minute, a
		// backlog draining at 91 a minute, and the rest of the 250.
		require.Equal(t, []int{100, 91, 59}, perMinute)
		require.Equal(t, 100, busiest)
	})
}
