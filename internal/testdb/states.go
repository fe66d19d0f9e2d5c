package testdb

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// JobStates counts the jobs in each state, in one query.
func JobStates(t testing.TB, s *engine.Store) map[string]int {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT state, COUNT(*) FROM sluice_jobs GROUP BY state")
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		require.NoError(t, rows.Scan(&state, &n))
		got[state] = n
	}
	require.NoError(t, rows.Err())
	return got
}
