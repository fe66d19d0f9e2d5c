package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
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

// A worker sweeps a budget's overflow at once when its claim parked jobs
// on it (a flood past the horizon), and otherwise only once its claims have
// deferred sweepAfter jobs on it while more were ready: a backlog of a few
// hundred is left to the claims of every worker, each waking for its own
// slots.
func TestAWorkerSweepsAFloodAtOnceAndABacklogLate(t *testing.T) {
	w := &Worker{}
	flood := engine.Overflow{Queue: "q", Kind: "k", Key: "flood"}
	backlog := engine.Overflow{Queue: "q", Kind: "k", Key: "backlog"}
	claim := func(o engine.Overflow, deferred int, parked bool) *engine.ClaimResult {
		res := &engine.ClaimResult{Overflows: []engine.Overflow{o}}
		for range deferred {
			res.Deferred = append(res.Deferred, engine.Deferral{Key: o.Key, Parked: parked})
		}
		res.Deferred = append(res.Deferred, engine.Deferral{Key: "elsewhere"})
		return res
	}
	require.Equal(t, []engine.Overflow{flood}, w.overflowing(claim(flood, 8, true)))
	require.Empty(t, w.overflowing(&engine.ClaimResult{Deferred: []engine.Deferral{{Key: "quiet"}}}), "no overflow, no sweep")
	for range sweepAfter/8 - 1 {
		require.Empty(t, w.overflowing(claim(backlog, 8, false)))
	}
	require.Equal(t, []engine.Overflow{backlog}, w.overflowing(claim(backlog, 8, false)), "the claims have deferred sweepAfter")
	require.Empty(t, w.overflowing(claim(backlog, 8, false)), "counting starts again after a sweep")
	require.NotContains(t, w.overflowed, "elsewhere", "a budget that did not overflow is not counted")
}
