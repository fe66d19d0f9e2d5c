package otelsluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

// observability.md, "Spans": "A failed attempt sets the span's status to
// Error with the error". A run that outlives its kind's Timeout fails with
// an error wrapping jobs.ErrJobTimeout ("job timed out after 1s: …"), as
// the job's last_error says. The middleware sees that error (the worker
// wraps the handler's before the middleware gets it), so the run's span
// tells a timeout from any other cancellation.
func TestATimedOutRunsSpanSaysItTimedOut(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan struct{})
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[mail]) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, jobs.Timeout(time.Second)))
		res, err := e.client.Enqueue(context.Background(), mail{N: 1})
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

// observability.md, "Side by side with Prometheus": both "count the same:
// a run released at shutdown counts once, as released, as its span says";
// and jobs.Classify "says what the worker will make of an error". A run
// whose kind's Timeout ran out, whose handler was still tidying up when
// the worker shut down and returned within the shutdown grace, is
// released: the worker classifies with its own context, whose cause is
// the shutdown, and the job goes back to ready with its attempt given
// back (OnFinish and sluice.jobs.finished say released). The span's
// middleware classifies with the handler's context, whose own cause is the
// timeout that ended it first: Classify reads the worker's shutdown too,
// so the span says released, as the database does.
func TestATimedOutRunReleasedAtShutdownHasAReleasedSpan(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan struct{})
		timedOut := make(chan struct{})
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[mail]) error {
			close(started)
			<-ctx.Done() // the timeout
			close(timedOut)
			<-unblock // tidying up
			return ctx.Err()
		}, jobs.Timeout(10*time.Second)))
		res, err := e.client.Enqueue(context.Background(), mail{N: 1})
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
