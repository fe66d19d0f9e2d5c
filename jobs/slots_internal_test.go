package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lead a worker wakes with before a slot follows its slowest recent
// claim, within its bounds, and forgets a slow claim gradually; on the
// worker's own clock (lead 0) claims cannot wait, and it stays 0.
func TestDueLeadFollowsHowLongClaimsTake(t *testing.T) {
	d := dueSlots{lead: minDueLead}
	d.learn(300 * time.Microsecond)
	require.Equal(t, minDueLead, d.lead, "fast claims keep the least lead")
	d.learn(6 * time.Millisecond)
	require.Equal(t, 7*time.Millisecond, d.lead, "a slow claim: its time and a millisecond")
	d.learn(time.Millisecond)
	require.Less(t, d.lead, 7*time.Millisecond, "forgotten gradually")
	require.Greater(t, d.lead, 6*time.Millisecond)
	for range 200 {
		d.learn(time.Millisecond)
	}
	require.Equal(t, minDueLead, d.lead, "and at last entirely")
	d.learn(time.Second)
	require.Equal(t, maxDueLead, d.lead, "never more than the longest wait a claim may hold a budget for")

	host := dueSlots{}
	host.learn(time.Second)
	require.Zero(t, host.lead)
}
