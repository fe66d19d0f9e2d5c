package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestOneAtATimePerAccountUnderOneQuota(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := run(ctx, s, 3, 3, 30*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 9, r.Ran)
		for a, n := range r.MostAtOnce {
			require.Equal(t, 1, n, "account %d", a)
		}
		// Starts are recorded a moment after the claims the quota counts;
		// the exact claim-time check is in the jobs package's tests.
		require.LessOrEqual(t, r.Busiest, quota.To+1)
	})
}
