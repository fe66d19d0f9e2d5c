package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestA429HoldsTheBudgetAndSpendsNoAttempt(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := run(ctx, s, 12)
		require.NoError(t, err)
		require.Equal(t, 1, r.Attempts, "a 429 spends no attempt")
		// The declared limit (10 a second) is looser than the server's 5:
		// some 429s come back, but each one holds the whole budget, so far
		// fewer than one per job.
		require.Less(t, r.TooMany, r.Jobs)
		require.Equal(t, r.Jobs+r.TooMany, r.Requests)
	})
}
