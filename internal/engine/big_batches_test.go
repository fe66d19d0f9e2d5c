package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// bigBatch is the largest claim a worker makes (jobs.MaxConcurrency), and
// so the most runs one finish reports. A bulk update of jobs (SetJobs)
// binds ten values a job on SQLite and MySQL, and SQLite binds at most
// 32,766 in one statement: one of 3,277 jobs or more failed there with
// "too many SQL variables".
const bigBatch = 10000

// A claim of the largest size over as many ready jobs of a budget of one
// a second admits one and defers all the others, on every database. It
// wrote the 9,999 deferrals in one statement: SQLite refused it, and the
// claim failed, at every poll, while the jobs stayed ready.
func TestAClaimOfTheLargestSizeDefersAWholeBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"sync": spec(t, "sync", 1, time.Second, 1)}
		jobs := make([]engine.NewJob, bigBatch)
		for i := range jobs {
			jobs[i] = limited("sync", "sync/global")
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, bigBatch, lim, time.Hour)
		require.Len(t, res.Jobs, 1)
		require.Len(t, res.Deferred, bigBatch-1)
		// A slot a second within the hour's horizon, the rest parked.
		require.Equal(t, map[string]int{"running": 1, "scheduled": 3600, "parked": bigBatch - 3601}, testdb.JobStates(t, s))
	})
}

// A finish of as many runs as the largest claim takes, none of them
// completed (retries, snoozes, failures for good), moves them all, on
// every database. It wrote them in one statement: SQLite refused it, and
// every run of the batch stayed running until its process was reaped.
func TestAFinishOfTheLargestSizeMovesAWholeBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		jobs := make([]engine.NewJob, bigBatch)
		for i := range jobs {
			jobs[i] = job("a", "default", 0)
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		claimed := claim(t, s, pid, t0, bigBatch).Jobs
		require.Len(t, claimed, bigBatch)
		require.NoError(t, s.Finish(context.Background(), pid, engine.At(t0), engine.Outcomes{Others: mixedOutcomes(claimed, "boom")}))
		require.Equal(t, map[string]int{"scheduled": 6667, "failed": 3333}, testdb.JobStates(t, s))
	})
}

// Every bulk update of jobs that a batch makes goes in runs of at most
// MaxInsertBatch jobs (setJobRuns), which keeps each statement under
// SQLite's bound: a claim's deferrals, a sweep's, a finish's outcomes and
// a release's give-backs. The test crosses the bound lowered to 100 jobs
// (smallBatches) with 250, and checks each took three statements of at
// most 100 jobs; a batch under the bound takes the one statement it took
// before. Writing a batch in one statement fails it.
func TestBulkJobUpdatesOfABatchGoInRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		const batch, n = 100, 250
		s, _, log := smallBatches(t, base, batch)
		pid := register(t, s, t0)
		lim := limits{"sync": spec(t, "sync", 1, time.Second, 1)}
		limitedJobs := func(n int) []engine.NewJob {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = limited("sync", "sync/global")
			}
			return jobs
		}
		const setJobs = "new_state"
		// rowsOf counts, for each bulk update, its rows in the given
		// states (one bound value each).
		rowsOf := func(states ...engine.State) []int {
			var out []int
			for _, st := range states {
				for i, n := range log.binds(setJobs, string(st)) {
					if i == len(out) {
						out = append(out, 0)
					}
					out[i] += n
				}
			}
			return out
		}

		// A claim's deferrals (each binds its wait key).
		enqueue(t, s, t0, limitedJobs(n)...)
		log.reset()
		res := claimLimited(t, s, pid, t0, n, lim, time.Hour)
		require.Len(t, res.Deferred, n-1)
		require.Equal(t, []int{100, 100, 49}, log.keys(setJobs, "sync/"), "a claim's deferrals")

		// A sweep's (DeferOverflow) behind them.
		enqueue(t, s, t0, limitedJobs(n)...)
		log.reset()
		o := engine.Overflow{Queue: "default", Kind: "sync", RateKeys: engine.EncodeRateKeys([]engine.RateKey{{Key: "sync/global", Cost: 1}}), Key: "sync/global"}
		swept, _, err := s.DeferOverflow(ctx, engine.At(t0), o, time.Hour, n)
		require.NoError(t, err)
		require.Len(t, swept, n)
		require.Equal(t, []int{100, 100, 50}, log.keys(setJobs, "sync/"), "a sweep's deferrals")

		// A finish's outcomes, and one under the bound: one statement, as
		// before.
		plain := make([]engine.NewJob, n)
		for i := range plain {
			plain[i] = job("a", "default", 0)
		}
		enqueue(t, s, t0, plain...)
		claimed := claim(t, s, pid, t0, n).Jobs
		require.Len(t, claimed, n)
		log.reset()
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: mixedOutcomes(claimed[:n-50], "boom")}))
		require.Equal(t, []int{100, 100}, rowsOf(engine.StateScheduled, engine.StateFailed), "a finish's outcomes")
		log.reset()
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: mixedOutcomes(claimed[n-50:], "boom")}))
		require.Equal(t, []int{50}, rowsOf(engine.StateScheduled, engine.StateFailed), "a finish under the bound")

		// A release's give-backs.
		enqueue(t, s, t0, plain...)
		claimed = claim(t, s, pid, t0, n).Jobs
		require.Len(t, claimed, n)
		log.reset()
		require.NoError(t, s.Release(ctx, pid, engine.At(t0), runsOf(claimed)))
		require.Equal(t, []int{100, 100, 50}, rowsOf(engine.StateReady), "a release's give-backs")

		// The first limited job runs, the others have a slot each within
		// the horizon; of the finished runs a third failed (66 of the
		// first 200, 16 of the last 50), the others wait their minute; the
		// released jobs are ready again.
		require.Equal(t, map[string]int{"running": 1, "scheduled": 2*n - 1 + n - 82, "failed": 82, "ready": n}, testdb.JobStates(t, base))
	})
}

// mixedOutcomes are outcomes of claimed runs none of which completed: a
// retry, a snooze and a failure for good in turn, each retry and failure
// with errText as its error.
func mixedOutcomes(claimed []*engine.Job, errText string) []engine.Transition {
	out := make([]engine.Transition, len(claimed))
	for i, j := range claimed {
		switch i % 3 {
		case 0:
			out[i] = engine.Transition{ID: j.ID, Claim: j.Claims, State: engine.StateScheduled, Wait: time.Minute, Error: errText}
		case 1:
			out[i] = engine.Transition{ID: j.ID, Claim: j.Claims, State: engine.StateScheduled, Wait: time.Minute, AttemptDelta: -1}
		default:
			out[i] = engine.Transition{ID: j.ID, Claim: j.Claims, State: engine.StateFailed, Error: errText, Finished: true}
		}
	}
	return out
}

// A claim whose jobs each draw on a budget of their own (a limit per
// customer) saves the budgets in runs of at most MaxInsertBatch: the save
// binds eight values a budget, and a claim of 4,096 such jobs or more
// failed on SQLite with "too many SQL variables". The test crosses the
// bound lowered to 100 budgets with 250.
func TestAClaimSavesManyBudgetsInRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		const batch, n = 100, 250
		s, _, log := smallBatches(t, base, batch)
		pid := register(t, s, t0)
		lim := limits{"per": spec(t, "per", 1, time.Second, 1)}
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = limited("per", fmt.Sprintf("per/c%04d", i))
		}
		enqueue(t, s, t0, jobs...)
		log.reset()
		require.Len(t, claimLimited(t, s, pid, t0, n, lim, time.Hour).Jobs, n)
		require.Equal(t, []int{100, 100, 50}, log.keys("INSERT INTO sluice_budgets (name, tat_ns", "per/"), "the budgets were saved in runs")
	})
}
