package jobs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

func TestWorkerRunsEveryJobOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			mu.Lock()
			runs[j.Args.N]++
			mu.Unlock()
			return nil
		}))
		const n = 200
		items := make([]jobs.Item, n)
		for i := range items {
			items[i] = jobs.Item{Args: noop{N: i}}
		}
		_, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)

		finished := make(chan jobs.FinishEvent, n)
		var stops []func()
		for i := 0; i < 3; i++ {
			w := h.worker(jobs.WorkerConfig{Concurrency: 5, Clock: systemClock(), PollInterval: 5 * time.Millisecond,
				Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { finished <- e }}})
			stops = append(stops, h.run(w))
		}
		events := receive(t, finished, n)
		for _, stop := range stops {
			stop()
		}
		for _, e := range events {
			require.Equal(t, jobs.OutcomeCompleted, e.Outcome)
		}
		require.Len(t, runs, n)
		for i, c := range runs {
			require.Equal(t, 1, c, "job %d ran %d times", i, c)
		}
		st, err := h.store.Stats(context.Background())
		require.NoError(t, err)
		require.Equal(t, int64(n), st[0].Counts[engine.StateCompleted])
	})
}

func TestWorkerWakesAtOnceForAnEnqueueInThisProcess(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := make(chan int, 1)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error { ran <- j.Args.N; return nil }))
		// The fake clock never moves, so the poll timer never fires: only
		// the wake-up can start the job.
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour})
		stop := h.run(w)
		defer stop()
		<-h.clock.WaitForTimers(2) // the worker's poll and heartbeat timers
		h.enqueue(noop{N: 7})
		require.Equal(t, []int{7}, receive(t, ran, 1))
	})
}

func TestRetriesBackOffOnTheFakeClock(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var calls atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			if calls.Add(1) < 3 {
				return errors.New("upstream unavailable")
			}
			return nil
		}))
		id := h.enqueue(noop{})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Retried)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, "upstream unavailable", j.LastError)
		require.Equal(t, 1, j.Attempt)
		wait := j.RunAt.Sub(t0)
		require.GreaterOrEqual(t, wait, 1800*time.Millisecond, "2 s backoff, -10%")
		require.LessOrEqual(t, wait, 2200*time.Millisecond, "2 s backoff, +10%")

		h.clock.Advance(wait - time.Millisecond)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran(), "not due yet")
		h.clock.Advance(time.Millisecond)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		second := h.job(id)
		require.Equal(t, 2, second.Attempt)
		gap := second.RunAt.Sub(h.clock.Now())
		require.GreaterOrEqual(t, gap, 3600*time.Millisecond, "4 s backoff")
		require.LessOrEqual(t, gap, 4400*time.Millisecond)

		h.clock.Advance(gap)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.Equal(t, 3, h.job(id).Attempt)
	})
}

func TestFailedAfterMaxAttempts(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return errors.New("bad request") },
			jobs.MaxAttempts(2), jobs.Backoff(func(int) time.Duration { return time.Second })))
		id := h.enqueue(noop{})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		h.clock.Advance(2 * time.Second)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Failed)
		j := h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, "bad request", j.LastError)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, h.clock.Now(), j.FinishedAt)
	})
}

type outcomeArgs struct{ Do string }

func (outcomeArgs) Kind() string { return "outcome" }

func TestCancelSnoozeAndPanic(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[outcomeArgs]) error {
			switch j.Args.Do {
			case "cancel":
				return jobs.Cancel(errors.New("account closed"))
			case "snooze":
				return jobs.Snooze(time.Minute)
			case "panic":
				panic("boom")
			}
			return nil
		}))
		cancel := h.enqueue(outcomeArgs{Do: "cancel"})
		snooze := h.enqueue(outcomeArgs{Do: "snooze"})
		boom := h.enqueue(outcomeArgs{Do: "panic"})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, jobs.DrainResult{Cancelled: 1, Snoozed: 1, Retried: 1}, res)

		j := h.job(cancel)
		require.Equal(t, engine.StateCancelled, j.State)
		require.Equal(t, "account closed", j.LastError)

		j = h.job(snooze)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 0, j.Attempt, "a snooze spends no attempt")
		require.Equal(t, t0.Add(time.Minute), j.RunAt)

		j = h.job(boom)
		require.Equal(t, engine.StateScheduled, j.State, "a panic fails the job, not the process")
		require.Contains(t, j.LastError, "panic: boom")
		require.Contains(t, j.LastError, "worker_test.go", "with its stack")
	})
}

func TestJobTimeoutCancelsTheHandlersContext(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[noop]) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, jobs.Timeout(10*time.Second)))
		id := h.enqueue(noop{})
		go func() {
			<-started
			<-h.clock.WaitForTimers(1)
			h.clock.Advance(10 * time.Second)
		}()
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
		require.Contains(t, h.job(id).LastError, "job timed out after 10s")
	})
}

func TestUnknownKindAndUndecodableArgsAreRetriedNotLost(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg)) // this process enqueues it, another runs it
		require.NoError(t, jobs.Register(h.reg, ok))
		unknown := h.enqueue(email{To: "x"})
		bad, err := h.store.Enqueue(context.Background(), nil, engine.At(t0), []engine.NewJob{{Kind: "noop", Queue: "default", Args: []byte(`{"N":"not a number"}`), MaxAttempts: 3}})
		require.NoError(t, err)
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Retried, "args that do not decode fail the attempt")
		require.Equal(t, 1, res.Snoozed, "a kind with no handler here is given back, its attempt unspent")

		j := h.job(unknown)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 0, j.Attempt)
		require.Contains(t, j.LastError, `no handler for kind "email"`)
		j = h.job(bad[0].ID)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Contains(t, j.LastError, "decode args of noop")
	})
}

func TestGracefulShutdownFinishesOrReleases(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 2)
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			started <- j.Args.N
			if j.Args.N == 1 {
				<-ctx.Done() // honours cancellation
				return ctx.Err()
			}
			<-unblock // ignores it
			return nil
		}))
		cooperative := h.enqueue(noop{N: 1})
		stubborn := h.enqueue(noop{N: 2})
		w := h.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, JobTimeout: -1})
		stop := h.run(w)
		receive(t, started, 2)
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(30 * time.Second)) // shutdown began
			h.clock.Advance(30 * time.Second)
			<-h.clock.WaitForTimerAt(t0.Add(31 * time.Second)) // the grace after cancelling
			h.clock.Advance(time.Second)
		}()
		stop()
		for _, id := range []int64{cooperative, stubborn} {
			j := h.job(id)
			require.Equal(t, engine.StateReady, j.State, "job %d is released back to ready", id)
			require.Equal(t, 0, j.Attempt, "and its attempt given back")
		}
		close(unblock) // the stubborn handler returns after its release: nothing changes
		require.Equal(t, engine.StateReady, h.job(stubborn).State)
	})
}

func TestGracefulShutdownLetsQuickJobsFinish(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{})
		finish := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[noop]) error {
			close(started)
			<-finish
			return nil
		}))
		id := h.enqueue(noop{})
		stop := h.run(h.worker(jobs.WorkerConfig{PollInterval: time.Hour}))
		<-started
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultShutdownTimeout))
			close(finish)
		}()
		stop()
		require.Equal(t, engine.StateCompleted, h.job(id).State)
	})
}

func TestALiveWorkerReleasesADeadProcesssJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ran := make(chan int, 1)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error { ran <- j.Attempt; return nil }))
		id := h.enqueue(noop{})
		// A process claims the job and is killed: it never heartbeats again.
		dead, err := h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		res, err := h.store.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.HostTime(h.clock.Now)})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)

		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour})
		stop := h.run(w)
		defer stop()
		// Minute by minute, the live worker heartbeats; at the sixth the
		// dead one's heartbeat is over 5 minutes old.
		for i := 1; i <= 6; i++ {
			<-h.clock.WaitForTimerAt(t0.Add(time.Duration(i) * time.Minute))
			h.clock.Advance(time.Minute)
		}
		require.Equal(t, []int{2}, receive(t, ran, 1), "it runs again, the lost run counted as an attempt")
		require.Equal(t, engine.LostError, h.job(id).LastError)
	})
}

func TestWorkerRefusesPendingMigrations(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s := b.OpenRaw(t)
			w, err := jobs.NewWorker(testdb.Public(s), jobs.NewRegistry(), jobs.WorkerConfig{Logger: quiet()})
			require.NoError(t, err)
			require.ErrorIs(t, w.Run(context.Background()), engine.ErrPendingMigrations)
		})
	}
}

// A worker stopped before it started (its context done while it checks
// the schema or registers) returns nil, as a graceful stop, and leaves no
// process registered.
func TestAWorkerStoppedBeforeItStartsReturnsNil(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w := h.worker(jobs.WorkerConfig{})
		require.NoError(t, w.Run(ctx))
		ps, err := h.store.ListProcesses(context.Background())
		require.NoError(t, err)
		require.Empty(t, ps)
	})
}
