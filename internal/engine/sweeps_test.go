package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// The workers that share a store sweep each budget once at a time, and
// know which of their queues a sweep is under way in.
func TestOneSweepPerBudgetAmongTheWorkersOfAStore(t *testing.T) {
	s := new(engine.Store)
	flood := engine.Overflow{Queue: "q", Kind: "k", Key: "k/flood"}
	other := engine.Overflow{Queue: "q", Kind: "k", Key: "k/other"}
	elsewhere := engine.Overflow{Queue: "r", Kind: "k", Key: "k/elsewhere"}

	require.False(t, s.Sweeping([]string{"q", "r"}), "no sweep yet")
	require.True(t, s.StartSweep(flood))
	require.False(t, s.StartSweep(flood), "a second worker leaves the budget to the first")
	require.True(t, s.StartSweep(other), "another budget is swept beside it")
	require.True(t, s.Sweeping([]string{"p", "q"}))
	require.False(t, s.Sweeping([]string{"r"}), "a queue without a sweep")

	s.EndSweep(flood)
	require.True(t, s.Sweeping([]string{"q"}), "the other budget's sweep is still under way")
	s.EndSweep(other)
	require.False(t, s.Sweeping([]string{"q"}))
	require.True(t, s.StartSweep(flood), "once over, the budget can be swept again")

	require.True(t, s.StartSweep(elsewhere))
	require.True(t, s.Sweeping([]string{"r"}))
	s.EndSweep(elsewhere)
	s.EndSweep(flood)
	require.False(t, s.Sweeping([]string{"q", "r"}))
}
