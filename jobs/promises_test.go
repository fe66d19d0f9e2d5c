package jobs_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// A job an upstream refused (a 429) waits on its rate limits as a
// deferred job does, and like one it gives its concurrency slot back: the
// next blocked job of its key runs meanwhile.
func TestA429GivesTheConcurrencySlotBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var ran []int
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, j.Args.N)
			if j.Args.N == 1 && j.Attempt == 1 && len(ran) == 1 {
				return jobs.RetryAfter(time.Minute)
			}
			return nil
		},
			jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }}),
			// Each job its own budget: the 429 holds back only the first's.
			jobs.RateLimit(ratelimit.Limit[accountJob]{To: 100, Per: time.Second, Burst: 100, Key: func(a accountJob) any { return a.N }})))
		first := h.enqueue(accountJob{Account: 7, N: 1})
		second := h.enqueue(accountJob{Account: 7, N: 2})
		require.Equal(t, engine.StateBlocked, h.job(second).State)

		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Throttled)
		require.Equal(t, 1, res.Completed, "the blocked job took the slot the throttled one gave back")
		require.Equal(t, []int{1, 2}, ran)
		j := h.job(first)
		require.Equal(t, engine.StateScheduled, j.State)
		require.False(t, j.HoldsSlot, "a job waiting on its rate holds no concurrency slot")

		h.clock.Advance(time.Minute)
		res = h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Completed, "it takes a slot again when it comes back")
		sems, err := h.store.ListSemaphores(context.Background())
		require.NoError(t, err)
		require.Zero(t, sems[0].Held)
	})
}

// A worker whose host clock runs 2 s ahead of the database, told to decide
// on the database's clock, charges and defers on the database's time.
func TestAWorkerAheadOfTheDatabaseDecidesOnItsClock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		dbClock := clock.NewFake(t0)
		s := testdb.WithDatabaseClock(base, dbClock.Now)
		host := clock.NewFake(t0.Add(2 * time.Second))
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[noop]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[noop]{To: 1, Per: 10 * time.Second, Key: "global"})))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: host})
		for range 2 {
			_, err := client.Enqueue(context.Background(), noop{})
			require.NoError(t, err)
		}
		var decided []time.Time
		var deferred []jobs.DeferEvent
		w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Clock: host, DatabaseClock: true, Logger: quiet(),
			Hooks: jobs.Hooks{
				OnClaim: func(e jobs.ClaimEvent) { decided = append(decided, e.DecidedAt) },
				OnDefer: func(e jobs.DeferEvent) { deferred = append(deferred, e) },
			}})
		require.NoError(t, err)
		res, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Completed)
		require.Equal(t, 1, res.Deferred)
		require.Equal(t, t0, decided[0], "the claim decided at the database's time, not the host's")
		bs, err := s.ListBudgets(context.Background())
		require.NoError(t, err)
		require.Equal(t, t0.Add(10*time.Second), bs[0].NextAdmission(t0), "charged on the database's clock")
	})
}

// A job whose cost exceeds its limit's burst after an override lowered it
// fails at once, logged with the reason, and its budget goes on as usual.
func TestAJobOverItsBurstAfterAnOverrideFails(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[syncArgs]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[syncArgs]{To: 10, Per: time.Second, Burst: 5, Key: "global",
				Cost: func(a syncArgs) int { return max(a.Items, 1) }})))
		big := h.enqueue(syncArgs{Items: 5})
		small := h.enqueue(syncArgs{Items: 1})
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sync", To: 10, Per: time.Second, Burst: 2}, t0))
		var log bytes.Buffer
		res := h.drain(jobs.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		require.Equal(t, 1, res.Completed)
		j := h.job(big)
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "the job costs 5, more than the burst of 2")
		require.Contains(t, log.String(), "costs more than its rate limit's burst")
		require.Equal(t, engine.StateCompleted, h.job(small).State)

		// Raised again, an operator's retry runs it.
		require.NoError(t, h.store.ClearOverride(ctx, "sync"))
		_, err := h.store.RetryJobs(ctx, engine.At(t0), []int64{big})
		require.NoError(t, err)
		h.clock.Advance(time.Second)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}

// A worker wakes at the slots its own claims handed out and admits the
// jobs that waited for them, with no dispatcher and an hour-long poll: a
// backlog drains at its limit's pace.
func TestAWorkerWakesAtTheSlotsItHandedOut(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := make(chan time.Time, 10)
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { ran <- h.clock.Now(); return nil },
			jobs.RateLimit(ratelimit.Limit[noop]{To: 2, Per: time.Second, Key: "global"})))
		for range 3 {
			h.enqueue(noop{})
		}
		stop := h.run(h.worker(jobs.WorkerConfig{PollInterval: time.Hour, HeartbeatInterval: time.Hour, DeadAfter: 3 * time.Hour}))
		defer stop()
		require.Equal(t, []time.Time{t0}, receive(t, ran, 1))
		for _, slot := range []time.Time{t0.Add(500 * time.Millisecond), t0.Add(time.Second)} {
			<-h.clock.WaitForTimerAt(slot)
			h.clock.Set(slot)
			require.Equal(t, []time.Time{slot}, receive(t, ran, 1))
		}
	})
}
