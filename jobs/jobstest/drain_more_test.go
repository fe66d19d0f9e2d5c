package jobstest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
)

type rlSync struct {
	Shop int `json:"shop"`
	N    int `json:"n"`
}

func (rlSync) Kind() string { return "rl_sync" }

// Drain "works the queues inline until no job is ready":
// jobs blocked on a concurrency slot are made ready as the holder ends, so
// one drain runs them all, one at a time, and never two of one key at once.
func TestDrainRunsEveryJobBlockedOnAConcurrencySlot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		var ran []int
		running := 0
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rlSync]) error {
			running++
			defer func() { running-- }()
			require.Equal(t, 1, running)
			ran = append(ran, j.Args.N)
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[rlSync]{Key: func(a rlSync) any { return a.Shop }, To: 1})))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})
		for i := range 4 {
			_, err := c.Enqueue(ctx, rlSync{Shop: 1, N: i})
			require.NoError(t, err)
		}
		r := jobstest.Drain(ctx, t, testdb.Public(s), reg, clk)
		require.Equal(t, 4, r.Completed, "%+v", r)
		require.ElementsMatch(t, []int{0, 1, 2, 3}, ran)
	})
}

// Drain and coalescing with Debounce on a fake clock: three calls
// make one pending job, which a drain runs only once the clock passes the
// debounce after the last call.
func TestDrainRunsACoalescedDebouncedJobOnceItIsDue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		runs := 0
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rlSync]) error {
			runs++
			return nil
		}, jobs.Coalesce(coalesce.Rule[rlSync]{Key: func(a rlSync) any { return a.Shop }, Debounce: time.Minute})))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})
		for i := range 3 {
			_, err := c.Enqueue(ctx, rlSync{Shop: 1, N: i})
			require.NoError(t, err)
			clk.Advance(10 * time.Second)
		}
		got, err := jobstest.Enqueued[rlSync](ctx, c, nil)
		require.NoError(t, err)
		require.Len(t, got, 1, "three calls, one pending job")
		require.Zero(t, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Ran())
		clk.Advance(31 * time.Second) // 20 s after the last call, then 40 s of its minute left
		require.Zero(t, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Ran(), "debounced from the last call")
		clk.Advance(30 * time.Second)
		require.Equal(t, 1, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Completed)
		require.Equal(t, 1, runs)
	})
}

// Drain and a snooze, a panic and a RetryAfter on a fake clock: the
// drain returns (a panic fails the attempt, not the test), and each comes
// back only once the test advances the clock.
func TestDrainSnoozePanicAndRetryAfterOnAFakeClock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		runs := map[int]int{}
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rlSync]) error {
			runs[j.Args.N]++
			if runs[j.Args.N] > 1 {
				return nil
			}
			switch j.Args.N {
			case 0:
				return jobs.Snooze(time.Minute)
			case 1:
				panic("boom")
			default:
				return jobs.RetryAfter(time.Minute)
			}
		}, jobs.Backoff(func(int) time.Duration { return time.Minute })))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})
		for i := range 3 {
			_, err := c.Enqueue(ctx, rlSync{N: i})
			require.NoError(t, err)
		}
		r := jobstest.Drain(ctx, t, testdb.Public(s), reg, clk)
		require.Equal(t, jobs.DrainResult{Snoozed: 1, Retried: 1, Throttled: 1}, r)
		require.Zero(t, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Ran())
		clk.Advance(time.Minute)
		require.Equal(t, 3, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Completed)
	})
}

// A handler that blocks until its context ends does not
// hang a drain whose context has a deadline.
func TestDrainWithABlockedHandlerEndsWithItsContext(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rlSync]) error {
			<-ctx.Done()
			return ctx.Err()
		}))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})
		_, err := c.Enqueue(context.Background(), rlSync{})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := w.Drain(ctx); done <- err }()
		select {
		case err := <-done:
			require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("drain hung")
		}
	})
}
