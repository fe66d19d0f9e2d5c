package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// While a sweep moves a flood, claims take the queue's limited jobs more
// urgent than it and after it (less urgent, or queued after its last job),
// in claim order and within their window, and leave to the sweep the
// flood, whatever is queued among its jobs or before them at their
// priority, and jobs like the flood's outside it; of a queue whose span is
// not known they take no limited job.
func TestClaimsTakeTheLimitedJobsAroundASweptFlood(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		prio := func(j engine.NewJob, p int) engine.NewJob { j.Priority = p; return j }
		var jobs []engine.NewJob
		jobs = append(jobs, limited("k", "k/before"))
		for range 5 {
			jobs = append(jobs, limited("k", "k/flood"))
		}
		jobs = append(jobs, limited("k", "k/among"))
		for range 5 {
			jobs = append(jobs, limited("k", "k/flood"))
		}
		jobs = append(jobs, limited("k", "k/after"), prio(limited("k", "k/urgent"), -1), prio(limited("k", "k/later"), 1), job("free", "default", 0))
		id := enqueue(t, s, t0, jobs...)
		before, among, after, urgent, later, free := id[0], id[6], id[12], id[13], id[14], id[15]
		flood := append(append([]int64{}, id[1:6]...), id[7:12]...)

		o := engine.Overflow{Queue: "default", Kind: "k", RateKeys: engine.EncodeRateKeys([]engine.RateKey{{Key: "k/flood", Cost: 1}}), Key: "k/flood"}
		span, ok, err := s.OverflowSpan(ctx, o)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, engine.Span{First: engine.Place{ID: flood[0]}, Last: engine.Place{ID: flood[9]}, Kind: "k", RateKeys: o.RateKeys}, span)
		// A job of the flood that comes after the span was read.
		stray := enqueue(t, s, t0, limited("k", "k/flood"))[0]

		pid := register(t, s, t0)
		claim := func(window int, swept map[string]*engine.Span) *engine.ClaimResult {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Candidates: window,
				Clock: engine.At(t0), Limits: lim, Horizon: time.Hour, Swept: swept})
			require.NoError(t, err)
			return res
		}
		res := claim(2, map[string]*engine.Span{"default": nil})
		require.Equal(t, []int64{free}, ids(res.Jobs), "no limited job while the span is not known")
		require.Empty(t, res.Deferred)

		res = claim(2, map[string]*engine.Span{"default": &span})
		require.Equal(t, []int64{urgent, after}, ids(res.Jobs), "the first two in claim order")
		require.True(t, res.MoreLimited)
		res = claim(10, map[string]*engine.Span{"default": &span})
		require.Equal(t, []int64{later}, ids(res.Jobs))
		require.Empty(t, res.Deferred, "the flood is left to the sweep")
		for _, j := range append(flood, before, among, stray) {
			require.Equal(t, engine.StateReady, state(t, s, j).State)
		}

		res = claim(20, nil)
		require.Equal(t, []int64{before, flood[0], among}, ids(res.Jobs), "once the sweep is over, claims meet the flood again")
		require.Len(t, res.Deferred, 10)
	})
}
