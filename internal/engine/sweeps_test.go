package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// The workers that share a store sweep each budget once at a time, and
// know what a sweep of their queues leaves to it: the whole of a queue's
// limited jobs until the flood's span is known or while two floods are
// swept in it, and only the span otherwise.
func TestOneSweepPerBudgetAmongTheWorkersOfAStore(t *testing.T) {
	s := new(engine.Store)
	flood := engine.Overflow{Queue: "q", Kind: "k", Key: "k/flood"}
	other := engine.Overflow{Queue: "q", Kind: "k", Key: "k/other"}
	elsewhere := engine.Overflow{Queue: "r", Kind: "k", Key: "k/elsewhere"}
	span := engine.Span{First: engine.Place{Priority: 0, ID: 10}, Last: engine.Place{Priority: 1, ID: 7}}

	require.Nil(t, s.Swept([]string{"q", "r"}), "no sweep yet")
	require.True(t, s.StartSweep(flood))
	require.False(t, s.StartSweep(flood), "a second worker leaves the budget to the first")
	require.Equal(t, map[string]*engine.Span{"q": nil}, s.Swept([]string{"p", "q"}), "the span is not known yet")
	s.SetSweepSpan(flood, span)
	require.Equal(t, map[string]*engine.Span{"q": &span}, s.Swept([]string{"p", "q"}))
	require.True(t, s.StartSweep(other), "another budget is swept beside it")
	s.SetSweepSpan(other, engine.Span{First: engine.Place{ID: 20}, Last: engine.Place{ID: 30}})
	require.Equal(t, map[string]*engine.Span{"q": nil}, s.Swept([]string{"q"}), "two floods in one queue: all of it")
	require.Nil(t, s.Swept([]string{"r"}), "a queue without a sweep")

	s.EndSweep(other)
	require.Equal(t, map[string]*engine.Span{"q": &span}, s.Swept([]string{"q"}), "the first flood's sweep is still under way")
	s.EndSweep(flood)
	require.Nil(t, s.Swept([]string{"q"}))
	require.True(t, s.StartSweep(flood), "once over, the budget can be swept again")
	s.SetSweepSpan(other, span) // a sweep that is over records nothing
	require.Equal(t, map[string]*engine.Span{"q": nil}, s.Swept([]string{"q"}))

	require.True(t, s.StartSweep(elsewhere))
	require.Equal(t, map[string]*engine.Span{"q": nil, "r": nil}, s.Swept([]string{"q", "r"}))
	s.EndSweep(elsewhere)
	s.EndSweep(flood)
	require.Nil(t, s.Swept([]string{"q", "r"}))
}
