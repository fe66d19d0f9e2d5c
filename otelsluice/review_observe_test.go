package otelsluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

// Review (observability): otelsluice's spans and metrics against what the
// database holds.

type reviewMail struct{ N int }

func (reviewMail) Kind() string { return "review_mail" }

// observability.md, "Around each enqueue": without the caller's
// transaction "the whole chain is one transaction: next begins it and
// writes the jobs, and it commits only when the outermost middleware
// returns nil". otelsluice's enqueue middleware is the outermost
// (InstrumentClient): its span ends, with the job's id
// (messaging.message.id) and no error, before the commit. When the commit
// then fails, the enqueue returns an error and the database holds no job,
// yet the trace shows a successful enqueue of a job that never existed.
func TestReviewObserveAnEnqueueWhoseCommitFailsHasNoSuccessfulSpan(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		o, err := otelsluice.New(otelsluice.Config{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider()})
		require.NoError(t, err)
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[reviewMail]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), reg, o.InstrumentClient(jobs.ClientConfig{Clock: c}))

		// How many statements (the commit last) one enqueue takes.
		for i := range 2 {
			_, err := client.Enqueue(ctx, reviewMail{N: i})
			require.NoError(t, err)
		}
		before := faults.Count()
		_, err = client.Enqueue(ctx, reviewMail{N: 2})
		require.NoError(t, err)
		per := faults.Count() - before

		faults.FailAt(per) // the next enqueue's commit
		_, err = client.Enqueue(ctx, reviewMail{N: 3})
		require.Error(t, err, "the commit failed")
		require.False(t, faults.Pending(), "the fault fired")
		var n int64
		rows, qerr := base.DB().Query(ctx, `SELECT COUNT(*) FROM sluice_jobs`)
		require.NoError(t, qerr)
		require.True(t, rows.Next())
		require.NoError(t, rows.Scan(&n))
		rows.Close()
		require.EqualValues(t, 3, n, "the failed enqueue wrote nothing")

		spans := sr.Ended()
		require.Len(t, spans, 4)
		last := spans[3]
		t.Logf("the failed enqueue's span: status %v %q, attributes %v", last.Status().Code, last.Status().Description, attrs(last))
		require.Equal(t, codes.Error, last.Status().Code, "the span of an enqueue that failed says so")
		_, named := attrs(last)["messaging.message.id"]
		require.False(t, named, "and names no job: none was written")
	})
}

// observability.md, "Spans": "A failed attempt sets the span's status to
// Error with the error". A run that outlives its kind's Timeout fails with
// an error wrapping jobs.ErrJobTimeout ("job timed out after 1s: …"), as
// the job's last_error says; the worker wraps it only after the
// middleware has returned, so the run's span records the handler's bare
// "context canceled": nothing on the trace tells a timeout from any other
// cancellation.
func TestReviewObserveATimedOutRunsSpanSaysItTimedOut(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan struct{})
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[reviewMail]) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, jobs.Timeout(time.Second)))
		res, err := e.client.Enqueue(context.Background(), reviewMail{N: 1})
		require.NoError(t, err)
		w := e.worker(jobs.WorkerConfig{})
		done := make(chan jobs.DrainResult, 1)
		go func() {
			out, err := w.Drain(context.Background())
			if err != nil {
				t.Errorf("drain: %v", err)
			}
			done <- out
		}()
		<-started
		e.clock.Advance(time.Second)
		out := <-done
		require.Equal(t, 1, out.Retried)

		ctx := context.Background()
		j, err := engine.From(e.store).GetJob(ctx, res.ID)
		require.NoError(t, err)
		run := e.span("process default")
		t.Logf("last_error %q; span status %q, error.type %q, events %v", j.LastError, run.Status().Description,
			attrs(run)["error.type"].AsString(), events(run)["exception"])
		require.Contains(t, j.LastError, jobs.ErrJobTimeout.Error())
		require.Equal(t, codes.Error, run.Status().Code)
		require.Contains(t, run.Status().Description, jobs.ErrJobTimeout.Error(),
			"the span's status names the timeout, as the job's last_error does")
	})
}

// A job retried after an hour has two run spans, each linked to the one
// enqueue span, with its attempt; sluice.job.latency measures each from
// the enqueue to its claim (0 s, then 3600 s on the fake clock), and
// every duration is non-negative.
func TestReviewObserveRetriedRunsLinkToTheirEnqueueAndLatencyCountsFromIt(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(_ context.Context, j *jobs.Job[reviewMail]) error {
			if j.Attempt == 1 {
				return errors.New("try again")
			}
			return nil
		}, jobs.Backoff(func(int) time.Duration { return time.Minute })))
		_, err := e.client.Enqueue(context.Background(), reviewMail{N: 1})
		require.NoError(t, err)
		e.drain(jobs.WorkerConfig{})
		e.clock.Advance(time.Hour)
		e.drain(jobs.WorkerConfig{})

		enq := e.span("enqueue default")
		var attempts []int64
		for _, s := range e.spans.Ended() {
			if s.Name() != "process default" {
				continue
			}
			attempts = append(attempts, attrs(s)["sluice.attempt"].AsInt64())
			require.Len(t, s.Links(), 1)
			require.Equal(t, enq.SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())
			require.False(t, s.EndTime().Before(s.StartTime()))
		}
		require.ElementsMatch(t, []int64{1, 2}, attempts)

		m := collect(t, e)
		var n uint64
		var total float64
		for _, dp := range histogram(t, m, "sluice.job.latency").DataPoints {
			n += dp.Count
			total += dp.Sum
			if v, ok := dp.Min.Value(); ok {
				require.GreaterOrEqual(t, v, 0.0)
			}
		}
		require.Equal(t, uint64(2), n)
		require.InDelta(t, 3600.0, total, 1e-6)
		for _, dp := range histogram(t, m, "sluice.job.duration").DataPoints {
			if v, ok := dp.Min.Value(); ok {
				require.GreaterOrEqual(t, v, 0.0)
			}
		}
	})
}

// observability.md, "Side by side with Prometheus": both "count the same:
// a run released at shutdown counts once, as released, as its span says";
// and jobs.Classify "says what the worker will make of an error". A run
// whose kind's Timeout ran out, whose handler was still tidying up when
// the worker shut down and returned within the shutdown grace, is
// released: the worker classifies with its own context, whose cause is
// the shutdown, and the job goes back to ready with its attempt given
// back (OnFinish and sluice.jobs.finished say released). The span's
// middleware classifies with the handler's context, whose cause is the
// timeout that ended it first: it says retried, with an Error status, for
// a run the database shows was released.
func TestReviewObserveATimedOutRunReleasedAtShutdownHasAReleasedSpan(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan struct{})
		timedOut := make(chan struct{})
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[reviewMail]) error {
			close(started)
			<-ctx.Done() // the timeout
			close(timedOut)
			<-unblock // tidying up
			return ctx.Err()
		}, jobs.Timeout(10*time.Second)))
		res, err := e.client.Enqueue(context.Background(), reviewMail{N: 1})
		require.NoError(t, err)
		w := e.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-started
		<-e.clock.WaitForTimerAt(t0.Add(10 * time.Second))
		e.clock.Advance(10 * time.Second)
		<-timedOut
		cancel() // the worker shuts down: it waits up to ShutdownTimeout…
		<-e.clock.WaitForTimerAt(t0.Add(40 * time.Second))
		e.clock.Advance(30 * time.Second)
		// … then cancels the jobs (errShutdown) and gives them a grace.
		<-e.clock.WaitForTimerAt(t0.Add(41 * time.Second))
		close(unblock) // the handler returns within the grace
		require.NoError(t, <-done)

		j, err := engine.From(e.store).GetJob(context.Background(), res.ID)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State, "released back to ready")
		require.Equal(t, 0, j.Attempt, "its attempt given back")
		require.Equal(t, map[string]int64{"released": 1}, finishedByOutcome(t, e), "OnFinish says released")
		run := e.span("process default")
		t.Logf("span: outcome %q, status %v %q", attrs(run)["sluice.outcome"].AsString(), run.Status().Code, run.Status().Description)
		require.Equal(t, "released", attrs(run)["sluice.outcome"].AsString(), "the span says what the metric and the database say")
		require.NotEqual(t, codes.Error, run.Status().Code)
	})
}
