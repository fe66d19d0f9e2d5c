package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "Changing a limit": under a looser limit, no window
// of the new Per that holds one of its admissions holds more than the new
// To, the window that spans the change included.
//
// The old limit, 10 a minute with a burst of 10, admits 10 at once and
// parks a backlog. It is loosened to 11 a minute, burst 1 (an interval of
// 5.45 s instead of 60 s): by Reprice a second later, as a worker's
// refresh does, or by the next claim. Claims every second then admit under
// the new limit: the first minute must hold at most 11. (The old rule
// capped the inherited debt at one new interval, and admitted a job every
// 5.45 s from the change on: 20 in the first minute.)
func TestALooserLimitKeepsTheNewToInAWindowThatSpansTheChange(t *testing.T) {
	for _, how := range []string{"reprice", "claim"} {
		t.Run(how, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				old := limits{"k": spec(t, "k", 10, time.Minute, 10)}
				looser := limits{"k": spec(t, "k", 11, time.Minute, 1)}
				var jobs []engine.NewJob
				for range 40 {
					jobs = append(jobs, limited("k", "k/a"))
				}
				enqueue(t, s, t0, jobs...)
				pid := register(t, s, t0)
				var admitted []time.Time
				res := claimLimited(t, s, pid, t0, 40, old, engine.DefaultHorizon)
				require.Len(t, res.Jobs, 10, "a quiet budget admits its burst")
				for range res.Jobs {
					admitted = append(admitted, res.DecidedAt)
				}
				require.Greater(t, budgetsByName(t, s)["k/a"].Parked, 0, "a backlog is parked")

				if how == "reprice" {
					n, err := s.Reprice(ctx, engine.At(at(time.Second)), engine.Repricing{Target: "k", Params: looser["k"].Params})
					require.NoError(t, err)
					require.Equal(t, 1, n)
				}
				// Fresh jobs keep the budget busy under the new limit.
				more := make([]engine.NewJob, 20)
				for i := range more {
					more[i] = limited("k", "k/a")
				}
				enqueue(t, s, at(time.Second), more...)
				for sec := 1; sec <= 59; sec++ {
					res := claimLimited(t, s, pid, at(time.Duration(sec)*time.Second), 1, looser, engine.DefaultHorizon)
					for range res.Jobs {
						admitted = append(admitted, res.DecidedAt)
					}
				}
				in := ratelimit.BusiestWindow(admitted, time.Minute)
				require.LessOrEqual(t, in, 11, "a window of the new Per (1m) holds %d admissions, over the new To 11: %v", in, admitted)
			})
		})
	}
}
