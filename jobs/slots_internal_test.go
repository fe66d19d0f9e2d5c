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

// A claim that admitted every rate-limited job it was allowed to decide
// widens the next to the worker's concurrency at once: a worker that
// starts against a backlog under a loose limit claims full batches from its
// second claim, not after doubling its way up. Deferrals narrow it again,
// and an admission with deferrals beside it widens it step by step.
func TestTheCandidateWindowWidensAtOnceWhenEveryoneWasAdmitted(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{Concurrency: 1000}, window: firstCandidates}
	limited := func(n int) []*engine.Job {
		out := make([]*engine.Job, n)
		for i := range out {
			out[i] = &engine.Job{RateKeys: []engine.RateKey{{Key: "k/a", Cost: 1}}}
		}
		return out
	}
	w.adaptWindow(&engine.ClaimResult{Jobs: limited(firstCandidates), MoreLimited: true}, firstCandidates)
	require.Equal(t, 1000, w.window, "all admitted, and more were ready")

	w.adaptWindow(&engine.ClaimResult{Jobs: limited(1), Deferred: make([]engine.Deferral, 999), MoreLimited: true}, 1000)
	require.Equal(t, 500, w.window, "a flood narrows it")

	w.adaptWindow(&engine.ClaimResult{Jobs: limited(300), Deferred: make([]engine.Deferral, 200), MoreLimited: true}, 500)
	require.Equal(t, 1000, w.window, "admitted more than deferred: it doubles")
	w.window = 64
	w.adaptWindow(&engine.ClaimResult{Jobs: limited(10)}, 64)
	require.Equal(t, 128, w.window, "fewer were ready than it could take: it doubles")
}
