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

type displacedSMS struct{ N int }

func (displacedSMS) Kind() string { return "displaced_sms" }

// Hooks.OnDefer: "so that the events count every deferral the jobs
// record". A more urgent job that a claim defers into the slot of a less
// urgent one sends that one round again (a displacement), which the
// displaced job records as a deferral: OnDefer reports it too. (It
// reported only the claim's own deferrals, so the deferral metrics fell
// short of the jobs' counts whenever priorities mixed on a budget.)
func TestOnDeferReportsTheJobsAnUrgentJobDisplaces(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[displacedSMS]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[displacedSMS]{To: 10, Per: time.Second, Burst: 1, Key: "global"})))
		var mu sync.Mutex
		reported, displaced := 0, 0
		cfg := jobs.WorkerConfig{Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) {
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, e.Count, len(e.JobIDs))
			reported += e.Count
			if e.Displaced {
				displaced += e.Count
			}
		}}}
		for i := range 15 {
			h.enqueue(displacedSMS{N: i}, jobs.Priority(1))
		}
		h.drain(cfg)
		h.clock.Advance(100 * time.Millisecond)
		h.drain(cfg)
		h.enqueue(displacedSMS{N: 99}, jobs.Priority(0))
		h.clock.Advance(20 * time.Millisecond)
		h.drain(cfg)

		mu.Lock()
		defer mu.Unlock()
		require.Positive(t, displaced, "the urgent job took a routine job's slot")
		require.EqualValues(t, sumDeferrals(t, h), reported, "every deferral the jobs record is reported to OnDefer")
	})
}
