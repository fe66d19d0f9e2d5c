package fairshare

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSharesByWeightAndBacklog(t *testing.T) {
	m := New()
	m.Add("a", 1, 100)
	m.Add("b", 3, 100)
	m.Round([]string{"a", "b", "b", "b"})
	s := m.Shares()
	require.InDelta(t, 1.0, s[0].Fair, 1e-9)
	require.InDelta(t, 3.0, s[1].Fair, 1e-9)
	require.InDelta(t, 1.0, m.Worst().Ratio(), 1e-9)

	// A key with one job left is owed one; the rest goes to the other.
	m = New()
	m.Add("a", 1, 1)
	m.Add("b", 1, 100)
	m.Round([]string{"b", "b", "b", "b"})
	s = m.Shares()
	require.InDelta(t, 1.0, s[0].Fair, 1e-9)
	require.InDelta(t, 3.0, s[1].Fair, 1e-9)
	require.InDelta(t, 0.0, m.Worst().Ratio(), 1e-9)
	require.Equal(t, "a", m.Worst().Key)
	require.Equal(t, 0, m.Worst().First)
	require.Equal(t, 1, s[1].First)

	// One key alone is owed nothing: work-conserving, not a share.
	m = New()
	m.Add("a", 1, 10)
	m.Round([]string{"a", "a"})
	require.Zero(t, m.Shares()[0].Fair)
	require.Equal(t, 8, m.Backlog("a"))
}
