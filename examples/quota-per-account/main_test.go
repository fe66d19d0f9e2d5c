package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestQuotaPerAccount(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		busiest, last, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Len(t, busiest, 3, "one budget per shop")
		for budget, n := range busiest {
			require.Equal(t, 2, n, budget)
			// 2 at once, then one a second: the tenth at 8 s, whatever the
			// other shops do.
			require.Equal(t, 8*time.Second, last[budget], budget)
		}
	})
}
