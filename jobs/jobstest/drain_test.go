package jobstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

type rvFlaky struct{ N int }

func (rvFlaky) Kind() string { return "rv_flaky" }

type rvLimited struct{ N int }

func (rvLimited) Kind() string { return "rv_limited" }

// README: "A fake clock (clock.NewFake) drives every time-based decision,
// and jobs/jobstest ... drains queues inline"; Drain: "with a fake clock,
// a test decides when retries and rate-limited jobs come due". A parked
// rate-limited job whose slot had come was handed it after the drain's
// promotion, so the drain returned with the job due and unrun.
func TestDrainOnAFakeClockRunsWhatHasComeDue(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		runs := 0
		if err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvFlaky]) error {
			runs++
			if j.Args.N == 1 && j.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}, jobs.Backoff(func(int) time.Duration { return time.Minute })); err != nil {
			t.Fatal(err)
		}
		limited := 0
		if err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvLimited]) error {
			limited++
			return nil
		}, jobs.RateLimit(ratelimit.Limit[rvLimited]{To: 1, Per: time.Hour, Burst: 1, Key: "global"})); err != nil {
			t.Fatal(err)
		}
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})

		if _, err := c.Enqueue(ctx, rvFlaky{N: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, rvFlaky{N: 2}, jobs.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		// Enqueued: newest first.
		got, err := jobstest.Enqueued[rvFlaky](ctx, c, nil)
		if err != nil || len(got) != 2 || got[0].Args.N != 2 {
			t.Fatalf("Enqueued = %+v, %v; want the delayed (newest) first", got, err)
		}

		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Retried != 1 || r.Ran() != 1 {
			t.Fatalf("first drain: %+v", r)
		}
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Ran() != 0 {
			t.Fatalf("drain without advancing ran %+v: the fake clock should hold the retry", r)
		}
		clk.Advance(time.Minute)
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Completed != 1 || r.Ran() != 1 {
			t.Fatalf("drain after the backoff: %+v", r)
		}
		clk.Advance(time.Hour)
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Completed != 1 || r.Ran() != 1 {
			t.Fatalf("drain after the delay: %+v", r)
		}

		for i := range 2 {
			if _, err := c.Enqueue(ctx, rvLimited{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Completed != 1 {
			t.Fatalf("rate-limited drain: %+v", r)
		}
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Ran() != 0 {
			t.Fatalf("second job ran inside the limit's hour: %+v", r)
		}
		clk.Advance(time.Hour)
		if r := jobstest.Drain(ctx, t, s, reg, clk); r.Completed != 1 {
			lj, _ := jobstest.Enqueued[rvLimited](ctx, c, nil)
			for _, j := range lj {
				t.Logf("after the drain: limited job %d: state %s run_at %v (now %v)", j.ID, j.State, j.RunAt, clk.Now())
			}
			t.Logf("a second drain: %+v", jobstest.Drain(ctx, t, s, reg, clk))
			t.Fatalf("Drain returned though a job was due (\"until no job is ready\"): %+v", r)
		}
	})
}

// Perform: "runs the handler ... as the first attempt of a job". A job
// that was enqueued gets Attempt 1 and the kind's MaxAttempts; a panic
// fails the run instead of the test process.
func TestPerformRunsAFirstAttempt(t *testing.T) {
	reg := jobs.NewRegistry()
	var seen *jobs.Job[rvFlaky]
	if err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvFlaky]) error {
		seen = j
		if j.Args.N < 0 {
			panic("boom")
		}
		return nil
	}, jobs.Queue("q1"), jobs.Priority(3), jobs.MaxAttempts(4)); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Perform(context.Background(), reg, rvFlaky{N: 5}); err != nil {
		t.Fatal(err)
	}
	if seen.Args.N != 5 || seen.Attempt != 1 || seen.MaxAttempts != 4 || seen.Queue != "q1" || seen.Priority != 3 || seen.Kind != "rv_flaky" {
		t.Fatalf("Perform's job = %+v", seen)
	}
	if err := jobs.Perform(context.Background(), reg, rvFlaky{N: -1}); err == nil {
		t.Fatal("a panicking handler: Perform returned nil")
	}
	if err := jobs.Perform(context.Background(), reg, rvLimited{}); !errors.Is(err, jobs.ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

type rvStripe struct{ N int }

func (rvStripe) Kind() string { return "rv_stripe" }

// Drain without queues drains the queues the registry's kinds go to, and
// the default queue: a kind registered with jobs.Queue("stripe") is run
// without naming its queue (it used to drain only "default", and such a
// test saw nothing run and no error).
func TestDrainWithoutQueuesDrainsTheKindsQueues(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		reg := jobs.NewRegistry()
		var stripe, plain int
		if err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvStripe]) error {
			stripe++
			return nil
		}, jobs.Queue("stripe")); err != nil {
			t.Fatal(err)
		}
		if err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[rvFlaky]) error {
			plain++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
		for _, a := range []jobs.Args{rvStripe{N: 1}, rvFlaky{N: 1}} {
			if _, err := c.Enqueue(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		// A job sent to a queue no kind names is left for a drain that
		// names it.
		if _, err := c.Enqueue(ctx, rvFlaky{N: 2}, jobs.Queue("elsewhere")); err != nil {
			t.Fatal(err)
		}
		if res := jobstest.Drain(ctx, t, s, reg, clk); res.Completed != 2 || stripe != 1 || plain != 1 {
			t.Fatalf("drained %+v, stripe ran %d, default ran %d; want both queues' jobs run once", res, stripe, plain)
		}
		if res := jobstest.Drain(ctx, t, s, reg, clk, "elsewhere"); res.Completed != 1 || plain != 2 {
			t.Fatalf("drained %+v of elsewhere; want its one job", res)
		}
	})
}
