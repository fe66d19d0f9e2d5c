package jobstest_test

// A user's own tests of their handlers, written only from what the
// README, docs/ and the package documentation say, on the fake clock, on
// every database.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

var rvT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type rvSync struct {
	Account int `json:"account"`
	N       int `json:"n"`
}

func (rvSync) Kind() string { return "rv_sync" }

// runLog records, in the handler, the fake time each run started at.
type runLog struct {
	mu   sync.Mutex
	at   []time.Duration // since rvT0
	args []rvSync
}

func (l *runLog) add(clk *clock.Fake, a rvSync) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, clk.Now().Sub(rvT0))
	l.args = append(l.args, a)
}

func (l *runLog) times() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.at...)
}

// rate-limits.md: "A quiet budget admits b at once, then one every T"
// with T = Per / (To − b + 1), and "At most To claims in any window of
// length Per". Drain: "with a fake clock, a test decides when ...
// rate-limited jobs come due". A user's test: 3 per 3 s, burst 1 (T = 1 s),
// four jobs of one account: the first runs at once, the rest exactly at
// +1 s, +2 s, +3 s — not a microsecond before — and an Advance that jumps
// several slots runs every job whose slot passed in one drain.
func TestAUsersRateLimitedKindRunsAtItsSlots(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var log runLog
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			log.add(clk, j.Args)
			return nil
		}, jobs.RateLimit(ratelimit.Limit[rvSync]{To: 3, Per: 3 * time.Second, Burst: 1,
			Key: func(a rvSync) any { return a.Account }})))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		for i := range 4 {
			_, err := c.Enqueue(ctx, rvSync{Account: 7, N: i})
			require.NoError(t, err)
		}
		// Another account has its own budget.
		_, err := c.Enqueue(ctx, rvSync{Account: 8})
		require.NoError(t, err)

		r := jobstest.Drain(ctx, t, s, reg, clk)
		require.Equal(t, 2, r.Completed, "one of account 7, one of account 8: %+v", r)
		require.GreaterOrEqual(t, r.Deferred, 3, "%+v", r)

		clk.Advance(time.Second - time.Microsecond)
		require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran(), "the second slot is at +1s")
		clk.Advance(time.Microsecond)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Completed, "the second slot came")
		// Past two slots at once: with burst 1 the budget cannot catch up
		// ("a slot is a hint and never charges the budget": a job claimed
		// late is charged when it is claimed), so one runs now and the
		// last one a whole interval later.
		clk.Advance(2 * time.Second)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Completed)
		clk.Advance(time.Second - time.Microsecond)
		require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
		clk.Advance(time.Microsecond)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Completed)
		require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
		require.Equal(t, []time.Duration{0, 0, time.Second, 3 * time.Second, 4 * time.Second}, log.times())
	})
}

// recurring.md: a task ticks once per tick however many dispatchers run;
// "one that catches up after a long stall runs only the latest tick that
// has passed (if nobody ran it), never a backlog of them"; "A single Tick
// called from a test runs them before it returns". A user's test of an
// @every 1m task: one job per minute, one for an Advance over several
// minutes (the latest), none when Tick is called twice at one time, and
// two dispatchers enqueue one job per tick.
func TestAUsersCronTaskUnderTheFakeClock(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0.Add(30 * time.Second))
		reg := jobs.NewRegistry()
		var log runLog
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			log.add(clk, j.Args)
			return nil
		}))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		cfg := dispatcher.Config{Clock: clk, Client: c, Logger: quietLog(),
			Tasks: []dispatcher.Task{{Key: "sync-every-minute", Schedule: "@every 1m", Args: rvSync{Account: 1}}}}
		d1, err := dispatcher.New(s, cfg)
		require.NoError(t, err)
		d2, err := dispatcher.New(s, cfg)
		require.NoError(t, err)
		tick := func() int {
			t.Helper()
			n := 0
			for _, d := range []*dispatcher.Dispatcher{d1, d2, d1} {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
			got, err := jobstest.Enqueued[rvSync](ctx, c, nil)
			require.NoError(t, err)
			n = len(got)
			return n
		}
		require.Equal(t, 0, tick(), "no tick before 00:01")
		clk.Advance(30 * time.Second) // 00:01:00
		require.Equal(t, 1, tick())
		clk.Advance(59 * time.Second)
		require.Equal(t, 1, tick(), "00:01:59: no new tick")
		clk.Advance(time.Second + 3*time.Minute + 30*time.Second) // 00:05:30: ticks 02, 03, 04, 05 passed
		require.Equal(t, 2, tick(), "only the latest passed tick (00:05) runs")
		clk.Advance(30 * time.Second) // 00:06:00
		require.Equal(t, 3, tick())
		r := jobstest.Drain(ctx, t, s, reg, clk)
		require.Equal(t, 3, r.Completed)
		require.Equal(t, []time.Duration{6 * time.Minute, 6 * time.Minute, 6 * time.Minute}, log.times())
	})
}

// concurrency.md: one at a time per key. A handler that enqueues more of
// its own key while it runs: Drain runs them all, one at a time, never
// two of a key at once, and returns.
func TestAUsersConcurrencyLimitedKindDrains(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var c *jobs.Client
		running := map[int]int{}
		ran := 0
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvSync]) error {
			running[j.Args.Account]++
			defer func() { running[j.Args.Account]-- }()
			require.Equal(t, 1, running[j.Args.Account])
			ran++
			if j.Args.N < 3 {
				_, err := c.Enqueue(ctx, rvSync{Account: j.Args.Account, N: j.Args.N + 1})
				return err
			}
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[rvSync]{Key: func(a rvSync) any { return a.Account }, To: 1})))
		c = jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		for _, acct := range []int{1, 1, 2} {
			_, err := c.Enqueue(ctx, rvSync{Account: acct})
			require.NoError(t, err)
		}
		r := jobstest.Drain(ctx, t, s, reg, clk)
		require.Equal(t, 12, r.Completed, "%+v", r)
		require.Equal(t, 12, ran)
	})
}

// guarantees.md: "An error from a handler retries the job after a
// backoff: 2^attempt seconds (2 s, 4 s, 8 s, …) with ±10% jitter". A
// user's test with the default backoff: the retry never runs before
// 90% of 2^attempt, always by 110%; after MaxAttempts the job is failed.
func TestAUsersRetryWithTheDefaultBackoff(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var attempts []int
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			attempts = append(attempts, j.Attempt)
			return errors.New("upstream down")
		}, jobs.MaxAttempts(3)))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		_, err := c.Enqueue(ctx, rvSync{})
		require.NoError(t, err)
		require.Equal(t, jobs.DrainResult{Retried: 1}, jobstest.Drain(ctx, t, s, reg, clk))
		for attempt := 1; attempt <= 2; attempt++ {
			base := time.Duration(1<<attempt) * time.Second
			clk.Advance(base*9/10 - time.Microsecond)
			require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran(), "attempt %d: before 90%% of %s", attempt, base)
			clk.Advance(base*2/10 + time.Microsecond)
			r := jobstest.Drain(ctx, t, s, reg, clk)
			require.Equal(t, 1, r.Ran(), "attempt %d: by 110%% of %s", attempt, base)
			if attempt == 2 {
				require.Equal(t, 1, r.Failed)
			}
		}
		require.Equal(t, []int{1, 2, 3}, attempts)
		got, err := jobstest.Enqueued[rvSync](ctx, c, nil)
		require.NoError(t, err)
		require.Equal(t, store.State("failed"), got[0].State)
		require.Equal(t, "upstream down", got[0].LastError)
	})
}

// guarantees.md: "return jobs.Snooze(d) runs it again after d without
// counting the attempt": the next run is again attempt 1, exactly d later.
func TestAUsersSnoozeRunsAgainAfterDWithoutAnAttempt(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var attempts []int
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			attempts = append(attempts, j.Attempt)
			if len(attempts) < 3 {
				return jobs.Snooze(time.Minute)
			}
			return nil
		}, jobs.MaxAttempts(1)))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		_, err := c.Enqueue(ctx, rvSync{})
		require.NoError(t, err)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Snoozed)
		for range 2 {
			clk.Advance(time.Minute - time.Microsecond)
			require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
			clk.Advance(time.Microsecond)
			require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Ran())
		}
		require.Equal(t, []int{1, 1, 1}, attempts, "a snooze spends no attempt, so MaxAttempts(1) still runs it")
	})
}

// guarantees.md / rate-limits.md: "return jobs.RetryAfterResponse(resp,
// fallback) ... after an upstream 429 runs it again after the upstream's
// wait without counting the attempt, holds back every budget the job ran
// under". A user's test with a fake upstream that answers 429 with a
// Retry-After in seconds and as an HTTP date reckoned on the test's
// clock.
func TestAUsersUpstream429OnTheFakeClock(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var log runLog
		calls := 0
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			log.add(clk, j.Args)
			calls++
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
			switch calls {
			case 1:
				resp.Header.Set("Retry-After", "120")
				return jobs.RetryAfterResponse(resp, time.Second)
			case 2:
				resp.Header.Set("Retry-After", clk.Now().Add(5*time.Minute).UTC().Format(http.TimeFormat))
				return jobs.RetryAfterResponse(resp, time.Second)
			}
			require.Equal(t, 1, j.Attempt, "a 429 spends no attempt")
			return nil
		}, jobs.RateLimit(ratelimit.Limit[rvSync]{To: 100, Per: time.Second, Burst: 100, Key: "api"})))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		_, err := c.Enqueue(ctx, rvSync{N: 1})
		require.NoError(t, err)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Throttled)
		// The budget is held too: another job of the kind waits.
		_, err = c.Enqueue(ctx, rvSync{N: 2})
		require.NoError(t, err)
		r := jobstest.Drain(ctx, t, s, reg, clk)
		require.Zero(t, r.Ran(), "the whole budget waits for the upstream: %+v", r)

		clk.Advance(2*time.Minute - time.Microsecond)
		require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
		clk.Advance(time.Microsecond)
		r = jobstest.Drain(ctx, t, s, reg, clk)
		require.Equal(t, 1, r.Throttled, "%+v", r) // the HTTP-date 429; the other job may run or wait
		clk.Advance(5*time.Minute - time.Microsecond)
		jobstest.Drain(ctx, t, s, reg, clk)
		require.Len(t, log.times(), 2+countN(&log, 2), "nothing of the budget runs before the HTTP date")
		clk.Advance(time.Microsecond)
		jobstest.Drain(ctx, t, s, reg, clk)
		// "Slots are staggered": the other job waits its own slot, one
		// interval (1 s) after the first's.
		clk.Advance(time.Second)
		jobstest.Drain(ctx, t, s, reg, clk)
		got, err := jobstest.Enqueued[rvSync](ctx, c, nil)
		require.NoError(t, err)
		for _, j := range got {
			require.Equal(t, store.State("completed"), j.State, "job %d", j.ID)
		}
	})
}

func countN(l *runLog, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := 0
	for _, a := range l.args {
		if a.N == n {
			c++
		}
	}
	return c
}

// coalesce.md: many enqueues, one pending job. Without a debounce the
// pending job runs at once; a call after it started makes a new one.
func TestAUsersCoalescedEnqueueRunsOnce(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		var log runLog
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rvSync]) error {
			log.add(clk, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[rvSync]{Key: func(a rvSync) any { return a.Account }, Debounce: 10 * time.Second})))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		var ids []int64
		for i := range 5 {
			res, err := c.Enqueue(ctx, rvSync{Account: 1, N: i})
			require.NoError(t, err)
			ids = append(ids, res.ID)
			clk.Advance(time.Second)
		}
		for _, id := range ids {
			require.Equal(t, ids[0], id, "every call joins the pending job")
		}
		clk.Advance(9*time.Second - time.Microsecond) // 10 s after the last call (at +4 s), less 1 µs
		require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
		clk.Advance(time.Microsecond)
		require.Equal(t, 1, jobstest.Drain(ctx, t, s, reg, clk).Completed)
		require.Len(t, log.times(), 1)
	})
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A user's test of a handler's timeout path on the fake clock, through
// Drain: the worker's timeout is a timer on the worker's clock, so the
// test waits until that timer is set (WaitForTimerAt, "the sign that the
// goroutine a test waits for has set the deadline it will wait for") and
// advances the clock past it; no sleep.
func TestAUsersTimeoutOnTheFakeClockThroughDrain(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvSync]) error {
			<-ctx.Done()
			return ctx.Err()
		}, jobs.Timeout(30*time.Second), jobs.MaxAttempts(1)))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		_, err := c.Enqueue(ctx, rvSync{})
		require.NoError(t, err)
		done := make(chan jobs.DrainResult, 1)
		go func() { done <- jobstest.Drain(ctx, t, s, reg, clk) }()
		select {
		case <-clk.WaitForTimerAt(rvT0.Add(30 * time.Second)):
		case <-time.After(30 * time.Second):
			t.Fatal("the job's timeout was never set on the fake clock")
		}
		clk.Advance(30 * time.Second)
		select {
		case r := <-done:
			require.Equal(t, 1, r.Failed, "%+v", r)
		case <-time.After(30 * time.Second):
			t.Fatal("drain hung")
		}
		got, err := jobstest.Enqueued[rvSync](ctx, c, nil)
		require.NoError(t, err)
		require.Contains(t, got[0].LastError, "timed out after 30s")
	})
}

// rate-limits.md: "To 0 pauses the limit: nothing it covers is admitted,
// nothing is lost". A drain of a paused kind returns (it does not spin on
// the deferrals) and runs nothing, however far the clock moves.
func TestAUsersDrainOfAPausedLimitReturns(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(rvT0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[rvSync]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[rvSync]{To: 0, Per: time.Minute, Key: "global"})))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		for i := range 3 {
			_, err := c.Enqueue(ctx, rvSync{N: i})
			require.NoError(t, err)
		}
		for range 3 {
			require.Zero(t, jobstest.Drain(ctx, t, s, reg, clk).Ran())
			clk.Advance(24 * time.Hour)
		}
		got, err := jobstest.Enqueued[rvSync](ctx, c, nil)
		require.NoError(t, err)
		require.Len(t, got, 3, "nothing is lost")
	})
}
