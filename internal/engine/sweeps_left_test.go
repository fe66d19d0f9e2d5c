package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A job like a swept flood's but more urgent than the jobs its budget has
// slotted, enqueued while the sweep runs, is the next its budget admits:
// the sweep leaves such a job to the claims (which give it the slot of a
// less urgent one), and the claims beside a sweep leave jobs like the
// flood's to the sweep, so the sweep ends at its next batch instead of
// moving the rest of the flood while the budget admits its less urgent
// jobs ahead of it, round after round.
func TestAnUrgentJobLikeASweptFloodsIsAdmittedNext(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		const horizon = time.Minute
		flood := make([]engine.NewJob, 30)
		for i := range flood {
			flood[i] = limited("k", "k/x")
			flood[i].Priority = 5
		}
		enqueue(t, s, t0, flood...)
		pid := register(t, s, t0)
		now := t0
		claimAt := func(swept map[string]*engine.Span) *engine.ClaimResult {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Candidates: 4,
				Clock: engine.At(now), Limits: lim, Horizon: horizon, PromoteDue: true, Swept: swept})
			require.NoError(t, err)
			return res
		}
		first := claimAt(nil)
		require.Len(t, first.Jobs, 1)
		require.Len(t, first.Overflows, 1, "the claim deferred jobs of the flood while more were ready")
		o := first.Overflows[0]
		span, ok, err := s.OverflowSpan(ctx, o)
		require.NoError(t, err)
		require.True(t, ok)
		ids, _, err := s.DeferOverflow(ctx, engine.At(now), o, horizon, 5)
		require.NoError(t, err)
		require.Len(t, ids, 5, "the sweep's first batch")

		urgent := limited("k", "k/x")
		urgent.Priority = 0
		u := enqueue(t, s, now, urgent)[0]

		// A worker's rounds: a batch of the sweep while it runs, then a
		// claim beside it (leaving the flood's jobs to it), a second on.
		sweeping := true
		var admitted []int64
		for round := 0; round < 40 && !slices.Contains(admitted, u); round++ {
			var swept map[string]*engine.Span
			if sweeping {
				ids, _, err := s.DeferOverflow(ctx, engine.At(now), o, horizon, 5)
				require.NoError(t, err)
				require.NotContains(t, ids, u, "the sweep gives the urgent job no slot at the back of the line")
				sweeping = len(ids) == 5
				if sweeping {
					swept = map[string]*engine.Span{"default": &span}
				}
			}
			now = now.Add(time.Second)
			for _, j := range claimAt(swept).Jobs {
				admitted = append(admitted, j.ID)
			}
		}
		require.NotEmpty(t, admitted)
		require.Equal(t, u, admitted[0], "the urgent job is admitted first after it arrived; admitted in order: %v", admitted)
	})
}
