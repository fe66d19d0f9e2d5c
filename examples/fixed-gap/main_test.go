package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestFixedGap(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		gaps, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Len(t, gaps, 12, "13 claims in 60 s of fake time, at 0, 5, …, 60 s")
		for _, g := range gaps {
			require.Equal(t, 5*time.Second, g)
		}
	})
}
