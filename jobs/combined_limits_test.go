package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// A handler's Snooze and RetryAfter from a job that
// holds a concurrency slot, a fair turn and a rate budget at once.

type tenantSync struct {
	Tenant int
	N      int
}

func (tenantSync) Kind() string { return "tenant_sync" }

// comboRig registers tenantSync as fair by tenant, one at a time per
// tenant, under one budget of 3 a second (burst 2): the handler does what
// act says for a job's first run, and records the runs.
type comboRig struct {
	h       *harness
	mu      sync.Mutex
	running map[int]int // per tenant
	most    map[int]int
	starts  map[int][]time.Time // per job N
}

func newComboRig(t *testing.T, h *harness, act func(n int) error) *comboRig {
	r := &comboRig{h: h, running: map[int]int{}, most: map[int]int{}, starts: map[int][]time.Time{}}
	require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[tenantSync]) error {
		r.mu.Lock()
		r.running[j.Args.Tenant]++
		r.most[j.Args.Tenant] = max(r.most[j.Args.Tenant], r.running[j.Args.Tenant])
		first := len(r.starts[j.Args.N]) == 0
		r.starts[j.Args.N] = append(r.starts[j.Args.N], h.clock.Now())
		r.mu.Unlock()
		defer func() { r.mu.Lock(); r.running[j.Args.Tenant]--; r.mu.Unlock() }()
		if first {
			return act(j.Args.N)
		}
		return nil
	},
		jobs.Fair(func(a tenantSync) any { return a.Tenant }),
		jobs.ConcurrencyLimit(concurrency.Limit[tenantSync]{Key: func(a tenantSync) any { return a.Tenant }}),
		jobs.RateLimit(ratelimit.Limit[tenantSync]{To: 3, Per: time.Second, Burst: 2, Key: "global"})))
	return r
}

// firstRunDoes registers the rig with job 1's first run returning err,
// enqueues job 1 and job 2 of tenant 1 (2 blocked behind 1) and job 3 of
// tenant 2, and drains: it returns the rig, jobs 1 and 2, job 1's fair
// start as enqueued, and what the drain did.
func firstRunDoes(t *testing.T, h *harness, err error) (r *comboRig, one, two, start int64, res jobs.DrainResult) {
	t.Helper()
	r = newComboRig(t, h, func(n int) error {
		if n == 1 {
			return err
		}
		return nil
	})
	one = h.enqueue(tenantSync{Tenant: 1, N: 1})
	two = h.enqueue(tenantSync{Tenant: 1, N: 2})
	h.enqueue(tenantSync{Tenant: 2, N: 3})
	start = h.job(one).FairStart
	return r, one, two, start, h.drain(jobs.WorkerConfig{})
}

func (r *comboRig) held(t *testing.T, key string) int {
	t.Helper()
	sems, err := r.h.store.ListSemaphores(context.Background())
	require.NoError(t, err)
	for _, s := range sems {
		if s.Name == key {
			require.Equal(t, s.Holding, s.Held, "semaphore %s counts its holders", key)
			return s.Held
		}
	}
	t.Fatalf("no semaphore %s", key)
	return 0
}

func (r *comboRig) budgetTAT(t *testing.T) int64 {
	t.Helper()
	bs, err := r.h.store.ListBudgets(context.Background())
	require.NoError(t, err)
	for _, b := range bs {
		if b.Name == "tenant_sync/global" {
			return b.TAT
		}
	}
	t.Fatalf("no budget tenant_sync/global in %+v", bs)
	return 0
}

// docs/guarantees.md: "return jobs.Snooze(d) runs it again after d without
// counting the attempt"; docs/concurrency.md: "A retry keeps its slot
// while it waits (and so does a snooze)"; docs/rate-limits.md: "A job
// that comes back is charged again: ... a snoozed job"; docs/fairness.md:
// a job that comes back keeps its start.
func TestASnoozedFairSlotHolderKeepsItsSlotAndItsStartAndIsChargedAgain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		r, s, b, start, res := firstRunDoes(t, h, jobs.Snooze(time.Second))
		require.Equal(t, 1, res.Snoozed)
		require.Equal(t, 1, res.Completed)
		sj := h.job(s)
		require.Equal(t, engine.StateScheduled, sj.State)
		require.True(t, sj.HoldsSlot, "a snooze keeps the slot")
		require.Equal(t, 0, sj.Attempt, "a snooze spends no attempt")
		require.Equal(t, start, sj.FairStart)
		require.Equal(t, engine.StateBlocked, h.job(b).State)
		require.Equal(t, 1, r.held(t, "tenant_sync/1"))
		tat := r.budgetTAT(t)

		h.clock.Advance(time.Second)
		res = h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed, "the snoozed job, then the one its slot goes to")
		require.Greater(t, r.budgetTAT(t), tat, "the snoozed job's second run is charged")
		require.Equal(t, 0, r.held(t, "tenant_sync/1"))
		require.Equal(t, 1, r.most[1], "one job of tenant 1 at a time")
		require.Len(t, r.starts[1], 2)
		require.False(t, r.starts[2][0].Before(r.starts[1][1]), "the blocked job ran after the snoozed one")
	})
}

// docs/rate-limits.md, When the upstream says 429: the job goes back to
// scheduled without spending an attempt; every budget it ran under is
// held back; "a job that held a concurrency slot gives it back while it
// waits ... and takes one again when it comes back (or is blocked)".
// With a fair key besides: the job keeps its start.
func TestA429FromAFairSlotHolderGivesItsSlotHoldsTheBudgetAndKeepsItsStart(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		r, ra, b, start, res := firstRunDoes(t, h, jobs.RetryAfter(2*time.Second))
		require.Equal(t, 1, res.Throttled)
		rj := h.job(ra)
		require.Equal(t, engine.StateScheduled, rj.State)
		require.False(t, rj.HoldsSlot, "a 429 gives the slot back")
		require.Equal(t, 0, rj.Attempt)
		require.Equal(t, start, rj.FairStart)
		// Its slot went to b, which the held-back budget then deferred: it
		// gave the slot back too.
		bj := h.job(b)
		require.Equal(t, engine.StateScheduled, bj.State, "b got the slot, and waits on the budget held back")
		require.False(t, bj.HoldsSlot)
		require.Equal(t, 0, r.held(t, "tenant_sync/1"))
		require.Len(t, r.starts[2], 0, "nothing admitted while the budget is held back")

		h.clock.Advance(time.Second)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran(), "still held back at 1 s")
		h.clock.Advance(time.Second)
		for range 5 {
			h.drain(jobs.WorkerConfig{})
			h.clock.Advance(500 * time.Millisecond)
		}
		require.Equal(t, engine.StateCompleted, h.job(ra).State)
		require.Equal(t, engine.StateCompleted, h.job(b).State)
		require.Equal(t, 0, r.held(t, "tenant_sync/1"))
		require.Equal(t, 1, r.most[1], "one job of tenant 1 at a time")
		for _, n := range []int{1, 2} {
			for _, at := range r.starts[n][min(1, len(r.starts[n])-1):] {
				require.False(t, at.Before(t0.Add(2*time.Second)), "job %d ran at %s, while the budget was held back", n, at.Sub(t0))
			}
		}
	})
}

// docs/guarantees.md, Queues: a paused queue's jobs "stay where they are
// until resume"; docs/rate-limits.md, Changing a limit without a restart:
// a tighter override counts the debt "in its own intervals too", and a window that
// spans the change can hold more than the new limit only until one new
// Per has passed. A fair, concurrency-limited, rate-limited kind with
// mixed priorities has a backlog waiting (slotted and parked) when its
// queue is paused; the operator tightens the limit while it is paused;
// nothing runs until the resume, then every job runs, within the new
// limit, and every slot is given back.
func TestPauseTightenResumeKeepsTheBoundAndLosesNothing(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[tenantSync]) error { record(h.clock.Now()); return nil },
			jobs.Fair(func(a tenantSync) any { return a.Tenant }),
			jobs.ConcurrencyLimit(concurrency.Limit[tenantSync]{Key: func(a tenantSync) any { return a.Tenant % 2 }, To: 2}),
			jobs.RateLimit(ratelimit.Limit[tenantSync]{To: 10, Per: time.Second, Burst: 5, Key: "global"})))
		for i := range 40 {
			h.enqueue(tenantSync{Tenant: i % 4, N: i}, jobs.Priority(i%3))
		}
		cfg := jobs.WorkerConfig{Horizon: 2 * time.Second}
		first := h.drain(cfg).Completed
		require.Positive(t, first)
		require.NoError(t, h.store.PauseQueue(ctx, "default", h.clock.Now()))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "tenant_sync", To: 2, Per: time.Second, Burst: 1}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		for range 20 {
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			require.Zero(t, h.drain(cfg).Ran(), "the queue is paused")
			h.clock.Advance(time.Second)
		}
		require.Len(t, starts(), first)
		require.NoError(t, h.store.ResumeQueue(ctx, "default", h.clock.Now()))
		resumed := h.clock.Now()
		steps(t, h, d, func() { h.drain(cfg) }, 400, 100*time.Millisecond)
		all := starts()
		require.Len(t, all, 40, "every job ran, once")
		require.LessOrEqual(t, ratelimit.BusiestWindow(since(all, resumed), time.Second), 2,
			"after the resume (more than one new Per after the change) no window of 1s holds more than the new To")
		sems, err := h.store.ListSemaphores(ctx)
		require.NoError(t, err)
		for _, s := range sems {
			require.Zero(t, s.Held, "semaphore %s", s.Name)
		}
	})
}
