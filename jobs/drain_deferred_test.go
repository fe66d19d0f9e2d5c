package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type drainedSMS struct{ N int }

func (drainedSMS) Kind() string { return "drained_sms" }

// DrainResult.Deferred and ClaimEvent.Deferred count every deferral the
// jobs record, as OnDefer reports them: a claim that defers an urgent job
// into the slot of a less urgent one sends that one to a later slot, and
// the displaced job records a deferral too (DeferEvent.Displaced).
func TestDrainResultDeferredCountsDisplacedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[drainedSMS]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[drainedSMS]{To: 10, Per: time.Second, Burst: 1, Key: "global"})))
		var mu sync.Mutex
		reported, displaced, claimDeferred := 0, 0, 0
		cfg := jobs.WorkerConfig{Hooks: jobs.Hooks{
			OnDefer: func(e jobs.DeferEvent) {
				mu.Lock()
				defer mu.Unlock()
				reported += e.Count
				if e.Displaced {
					displaced += e.Count
				}
			},
			OnClaim: func(e jobs.ClaimEvent) {
				mu.Lock()
				defer mu.Unlock()
				claimDeferred += e.Deferred
			},
		}}
		drained := 0
		for i := range 15 {
			h.enqueue(drainedSMS{N: i}, jobs.Priority(1))
		}
		drained += h.drain(cfg).Deferred
		h.clock.Advance(100 * time.Millisecond)
		drained += h.drain(cfg).Deferred
		h.enqueue(drainedSMS{N: 99}, jobs.Priority(0))
		h.clock.Advance(20 * time.Millisecond)
		drained += h.drain(cfg).Deferred

		mu.Lock()
		defer mu.Unlock()
		stored := sumDeferrals(t, h)
		t.Logf("deferrals stored on the jobs: %d; OnDefer: %d (displaced %d); ClaimEvent.Deferred: %d; DrainResult.Deferred: %d",
			stored, reported, displaced, claimDeferred, drained)
		require.Positive(t, displaced, "the urgent job took a routine job's slot")
		require.EqualValues(t, stored, reported, "OnDefer reports every deferral")
		require.EqualValues(t, stored, drained, "DrainResult.Deferred counts every deferral the jobs record, the displaced ones too")
		require.EqualValues(t, stored, claimDeferred, "and so do the claims' ClaimEvent.Deferred")
	})
}
