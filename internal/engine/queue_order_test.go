package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "Ordering": "A worker's queues are tried in the order
// given", not in the order of their names.
func TestQueuesAreTriedInTheOrderGivenNotByName(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		a := enqueue(t, s, t0, job("a", "alpha", -5))[0]
		z := enqueue(t, s, t0, job("a", "zeta", 5))[0]
		pid := register(t, s, t0)
		require.Equal(t, []int64{z}, ids(claim(t, s, pid, t0, 1, "zeta", "alpha").Jobs))
		require.Equal(t, []int64{a}, ids(claim(t, s, pid, t0, 1, "zeta", "alpha").Jobs))
	})
}
