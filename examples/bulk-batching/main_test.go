package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

func TestBulkCallsBatchWhileTheyWait(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		sizes, sent, err := run(context.Background(), s)
		require.NoError(t, err)
		require.Equal(t, 300, sent)
		// Two requests at once (the burst), then one every 60/9 s (at 7 s,
		// 14 s, 20 s, … on the 1 s steps): ten in the minute, each carrying
		// the calls that arrived while it waited.
		require.Equal(t, []int{5, 5, 30, 35, 35, 30, 35, 35, 30, 35}, sizes)
	})
}
