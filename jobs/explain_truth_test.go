package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

type truthNoop struct{ N int }

func (truthNoop) Kind() string { return "truth_noop" }

type truthSerial struct{ N int }

func (truthSerial) Kind() string { return "truth_serial" }

type truthLimited struct{ N int }

func (truthLimited) Kind() string { return "truth_limited" }

// rate-limits.md, "Reading sluice explain": a paused queue means "none
// [no estimated start] until the queue is resumed", and the summary of a
// parked job in a paused queue itself says "queue default is paused too,
// so it waits for a resume after that". Explain still gives the parked
// job an estimated start from the budget's slots (the scheduled and
// ready branches drop theirs for a paused queue): the dashboard and
// `sluice explain` show a time at which the job will certainly not start.
func TestExplainGivesNoStartForAParkedJobInAPausedQueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[truthLimited]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[truthLimited]{To: 10, Per: time.Second, Key: "global"})))
		var ids []int64
		for i := range 40 {
			ids = append(ids, h.enqueue(truthLimited{N: i}))
		}
		h.drain(jobs.WorkerConfig{Horizon: time.Second})
		deep := ids[35]
		require.Equal(t, engine.StateParked, h.job(deep).State)
		require.NoError(t, h.store.PauseQueue(ctx, "default", t0))

		e := h.explain(deep)
		require.Equal(t, jobs.ReasonParked, e.Reason)
		require.Contains(t, e.Summary, "paused")
		require.True(t, e.EstimatedStart.IsZero(),
			"a parked job of a paused queue is given an estimated start of %s (%s), though it waits for the resume", e.EstimatedStart, e.EstimateBasis)
	})
}

// Passes (probe of "ready … with N ready jobs of its queue ahead of it (by
// priority, then id)"): on a queue of plain jobs of mixed priorities, the
// count explain gives is the number of jobs claimed before the job, one
// claim at a time.
func TestExplainReadyAheadMatchesTheClaimOrder(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[truthNoop]) error { return nil }))
		prios := []int{3, 1, 2, 1, 0, 5, 2, -1, 3, 1, 0, 4}
		var ids []int64
		for i, p := range prios {
			ids = append(ids, h.enqueue(truthNoop{N: i}, jobs.Priority(p)))
		}
		target := ids[6] // priority 2
		e := h.explain(target)
		require.Equal(t, jobs.ReasonReady, e.Reason)
		pid, err := h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "t", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		before := 0
		for {
			res, err := h.store.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			if res.Jobs[0].ID == target {
				break
			}
			before++
		}
		require.Equal(t, int64(before), e.Ahead.N, "explain said %d ahead; %d were claimed first", e.Ahead.N, before)
	})
}

// Passes (probe of "blocked: … N blocked job(s) before it"): the count of
// blocked jobs before one is the number of them given the slot before
// it, one holder finishing at a time.
func TestExplainBlockedAheadMatchesTheSlotOrder(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var order []int64
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[truthSerial]) error {
			order = append(order, j.ID)
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[truthSerial]{To: 1, Key: "one"})))
		prios := []int{0, 3, 1, 2, 1, 0}
		var ids []int64
		for i, p := range prios {
			ids = append(ids, h.enqueue(truthSerial{N: i}, jobs.Priority(p)))
		}
		target := ids[3] // priority 2: after ids[5], ids[2], ids[4]
		e := h.explain(target)
		require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)
		for range len(ids) {
			h.drain(jobs.WorkerConfig{Concurrency: 1})
		}
		require.Len(t, order, len(ids))
		pos := -1
		for i, id := range order {
			if id == target {
				pos = i
			}
		}
		require.GreaterOrEqual(t, pos, 1)
		// order[0] is the holder when explain ran; the rest were blocked.
		require.Equal(t, int64(pos-1), e.Ahead.N, "explain said %d blocked before it; run order %v (ids %v)", e.Ahead.N, order, ids)
	})
}

// Passes (probe of rate-limits.md's codes W003, W007 and W008): with no
// live process they all fire; with a live worker of the queues and a live
// dispatcher, none does; a worker and a dispatcher whose heartbeats are
// older than 5 minutes count for nothing.
func TestCheckLivenessWarningsFireAndClear(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[truthNoop]) error { return nil },
			jobs.Queue("mail")))
		require.NoError(t, reg.LimitQueue("mail", ratelimit.QueueLimit{To: 10, Per: time.Second}))
		pub := testdb.Public(s)
		codes := func() string {
			f, err := jobs.Check(ctx, reg, pub)
			require.NoError(t, err)
			var out []string
			for _, x := range f {
				out = append(out, x.Code)
			}
			return strings.Join(out, " ")
		}
		all := codes()
		for _, c := range []string{"W003", "W007", "W008"} {
			require.Contains(t, all, c)
		}
		now, err := s.Now(ctx, engine.DatabaseTime(time.Now))
		require.NoError(t, err)
		stale := engine.At(now.Add(-6 * time.Minute))
		_, err = s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "old", PID: 1, Queues: "mail"}, stale)
		require.NoError(t, err)
		_, err = s.RegisterProcess(ctx, engine.Process{Kind: "dispatcher", Name: "old", PID: 2}, stale)
		require.NoError(t, err)
		require.Equal(t, all, codes(), "stale processes count for nothing")
		_, err = s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "w", PID: 3, Queues: "mail"}, engine.At(now))
		require.NoError(t, err)
		_, err = s.RegisterProcess(ctx, engine.Process{Kind: "dispatcher", Name: "d", PID: 4}, engine.At(now))
		require.NoError(t, err)
		got := codes()
		for _, c := range []string{"W003", "W007", "W008"} {
			require.NotContains(t, got, c)
		}
	})
}

var _ = store.Override{}
