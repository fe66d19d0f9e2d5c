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
)

type mixedPlan struct {
	Plan string
}

func (mixedPlan) Kind() string { return "mixed_plan" }

// Hooks.OnFinish: "called once for each run the worker starts … with the
// outcome the worker decided". Over a run of every outcome (retries,
// failures for good, panics, snoozes, 429s, cancellations), across two
// drains of two workers on two stores of one database, each run is
// reported once, and the outcomes add up to what the database holds.
func TestOnFinishMatchesTheDatabase(t *testing.T) {
	eachPool(t, func(t *testing.T, h *harness, other *harness) {
		var waited sync.Map
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[mixedPlan]) error {
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
			h.enqueue(mixedPlan{Plan: p})
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
