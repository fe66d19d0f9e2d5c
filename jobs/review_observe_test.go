package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Review (observability): what the worker reports about itself against
// what the database holds.

type reviewObsSMS struct{ N int }

func (reviewObsSMS) Kind() string { return "review_obs_sms" }

// DrainResult.Deferred: "counts deferrals by rate limits (a job may wait
// more than once)". A claim that defers an urgent job into the slot of a
// less urgent one sends that one to a later slot: the displaced job records
// a deferral (and OnDefer reports it, DeferEvent.Displaced), but Drain
// adds only len(res.Deferred) to its count, never res.Displaced.
func TestReviewObserveDrainResultDeferredCountsDisplacedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[reviewObsSMS]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[reviewObsSMS]{To: 10, Per: time.Second, Burst: 1, Key: "global"})))
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
			h.enqueue(reviewObsSMS{N: i}, jobs.Priority(1))
		}
		drained += h.drain(cfg).Deferred
		h.clock.Advance(100 * time.Millisecond)
		drained += h.drain(cfg).Deferred
		h.enqueue(reviewObsSMS{N: 99}, jobs.Priority(0))
		h.clock.Advance(20 * time.Millisecond)
		drained += h.drain(cfg).Deferred

		mu.Lock()
		defer mu.Unlock()
		stored := sumDeferrals(t, h)
		t.Logf("deferrals stored on the jobs: %d; OnDefer: %d (displaced %d); ClaimEvent.Deferred: %d; DrainResult.Deferred: %d",
			stored, reported, displaced, claimDeferred, drained)
		require.Positive(t, displaced, "the urgent job took a routine job's slot")
		require.EqualValues(t, stored, reported, "OnDefer reports every deferral (holds)")
		require.EqualValues(t, stored, drained, "DrainResult.Deferred counts every deferral the jobs record, the displaced ones too")
	})
}

type reviewObsMixed struct {
	Plan string
}

func (reviewObsMixed) Kind() string { return "review_obs_mixed" }

// Hooks.OnFinish: "called once for each run the worker starts … with the
// outcome the worker decided". Over a run of every outcome (retries,
// failures for good, panics, snoozes, 429s, cancellations), across two
// drains of two workers on two stores of one database, each run is
// reported once, and the outcomes add up to what the database holds.
func TestReviewObserveOnFinishMatchesTheDatabase(t *testing.T) {
	eachPool(t, func(t *testing.T, h *harness, other *harness) {
		var waited sync.Map
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[reviewObsMixed]) error {
			switch j.Args.Plan {
			case "ok":
				return nil
			case "fail":
				return errors.New("boom")
			case "panic":
				panic("kaboom")
			case "snooze":
				if _, again := waited.LoadOrStore(j.ID, true); !again {
					return jobs.Snooze(time.Minute)
				}
				return nil
			case "429":
				if _, again := waited.LoadOrStore(j.ID, true); !again {
					return jobs.RetryAfter(time.Minute)
				}
				return nil
			case "cancel":
				return jobs.Cancel(errors.New("no longer wanted"))
			}
			return nil
		}, jobs.MaxAttempts(2)))
		var mu sync.Mutex
		perOutcome := map[jobs.Outcome]int{}
		perJob := map[int64]int{}
		cfg := jobs.WorkerConfig{Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) {
			mu.Lock()
			defer mu.Unlock()
			perOutcome[e.Outcome]++
			perJob[e.JobID]++
			if e.Duration < 0 {
				t.Errorf("negative duration %v", e.Duration)
			}
		}}}
		plans := []string{"ok", "ok", "fail", "panic", "snooze", "429", "cancel"}
		for _, p := range plans {
			h.enqueue(reviewObsMixed{Plan: p})
		}
		h.drain(cfg)
		h.clock.Advance(time.Hour)
		other.drain(cfg)
		h.clock.Advance(time.Hour)
		h.drain(cfg)

		mu.Lock()
		defer mu.Unlock()
		t.Logf("outcomes: %v", perOutcome)
		count := func(q string) int { return int(queryOne(t, h, q)) }
		require.Equal(t, count(`SELECT COUNT(*) FROM sluice_jobs WHERE state = 'completed'`), perOutcome[jobs.OutcomeCompleted])
		require.Equal(t, count(`SELECT COUNT(*) FROM sluice_jobs WHERE state = 'failed'`), perOutcome[jobs.OutcomeFailed])
		require.Equal(t, count(`SELECT COUNT(*) FROM sluice_jobs WHERE state = 'cancelled'`), perOutcome[jobs.OutcomeCancelled])
		require.Equal(t, count(`SELECT COUNT(*) FROM sluice_attempts`),
			perOutcome[jobs.OutcomeRetried]+perOutcome[jobs.OutcomeFailed]+perOutcome[jobs.OutcomeCancelled],
			"every failed (or cancelling) run is kept, and reported once as retried, failed or cancelled")
		require.Equal(t, 1, perOutcome[jobs.OutcomeSnoozed])
		require.Equal(t, 1, perOutcome[jobs.OutcomeThrottled])
		require.Equal(t, count(`SELECT COUNT(*) FROM sluice_jobs WHERE state IN ('ready', 'scheduled', 'running')`), 0)
		runs := 0
		for _, n := range perJob {
			runs += n
		}
		require.Equal(t, runs, perOutcome[jobs.OutcomeCompleted]+perOutcome[jobs.OutcomeFailed]+perOutcome[jobs.OutcomeCancelled]+
			perOutcome[jobs.OutcomeRetried]+perOutcome[jobs.OutcomeSnoozed]+perOutcome[jobs.OutcomeThrottled])
	})
}

// eachPool runs fn per backend with two harnesses on one database, each
// with a store (a connection pool) of its own, as two processes have, and
// one registry and fake clock.
func eachPool(t *testing.T, fn func(t *testing.T, h, other *harness)) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		h := &harness{t: t, store: s, clock: c, reg: reg, client: jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})}
		s2 := open()
		other := &harness{t: t, store: s2, clock: c, reg: reg, client: jobs.NewClient(testdb.Public(s2), reg, jobs.ClientConfig{Clock: c})}
		fn(t, h, other)
	})
}
