package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type reviewExportA struct{ Tenant string }

func (reviewExportA) Kind() string { return "review_export_a" }

type reviewExportB struct{ Tenant string }

func (reviewExportB) Kind() string { return "review_export_b" }

// rate-limits.md, "Checks": "W005 | kinds of one concurrency group declare
// different To; the key's limit is the To of the kind enqueued last". No
// test asked jobs.Check for it. (A probe: it holds.)
func TestReviewNewUserCheckWarnsOfAConcurrencyGroupWithDifferentTo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		tenant := func(a reviewExportA) any { return a.Tenant }
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[reviewExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[reviewExportA]{To: 1, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[reviewExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[reviewExportB]{To: 3, Group: "exports", Key: func(b reviewExportB) any { return b.Tenant }})))
		findings, err := jobs.Check(context.Background(), h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		var w005 []string
		for _, f := range findings {
			if f.Code == jobs.CodeConcurrencyGroupMismatch {
				w005 = append(w005, f.String())
			}
		}
		require.Len(t, w005, 1, "%v", findings)
		require.Contains(t, w005[0], "W005 warning: concurrency group exports is declared with different limits")
		require.Contains(t, w005[0], "review_export_a: To 1")
		require.Contains(t, w005[0], "review_export_b: To 3")

		// Kinds of one group that agree are not reported.
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[reviewExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[reviewExportA]{To: 2, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[reviewExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[reviewExportB]{To: 2, Group: "exports", Key: func(b reviewExportB) any { return b.Tenant }})))
		findings, err = jobs.Check(context.Background(), reg, testdb.Public(h.store))
		require.NoError(t, err)
		for _, f := range findings {
			require.NotEqual(t, jobs.CodeConcurrencyGroupMismatch, f.Code, f.String())
		}
	})
}

// guarantees.md, "Nothing lost": "A job whose kind this worker does not
// know ... fails the attempt with a clear error and is retried with
// backoff ... The worker logs an unknown kind once." The retry is tested
// (TestUnknownKindAndUndecodableArgsAreRetriedNotLost); the log line was
// not. (A probe: it holds, once per kind and worker.)
func TestReviewNewUserAWorkerLogsAnUnknownKindOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg)) // enqueued here, run elsewhere
		require.NoError(t, jobs.Declare[noop](h.reg))
		for range 3 {
			h.enqueue(email{To: "x"})
		}
		h.enqueue(noop{N: 1})
		logs := &logLines{}
		w := h.worker(jobs.WorkerConfig{Logger: logs.logger()})
		res, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Retried, "every job of a kind with no handler is retried, none lost")
		const msg = "no handler for a claimed job's kind"
		require.Equal(t, 2, logs.count(msg), "one line per unknown kind: %q", logs.lines)
		require.Contains(t, logs.find(t, msg+"; it is retried with backoff until a worker that has one claims it\" kind=email"), "job_id=")
		require.Contains(t, logs.find(t, msg+"; it is retried with backoff until a worker that has one claims it\" kind=noop"), "job_id=")

		// The retries, once due, log nothing more.
		h.clock.Advance(jobs.MaxBackoff)
		res, err = w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Retried)
		require.Equal(t, 2, logs.count(msg), "still once per kind")
	})
}

// guarantees.md: "After MaxAttempts (25 by default) the job is kept as
// failed", and "A job's timeout (WorkerConfig.JobTimeout, 1 minute by
// default, or the kind's jobs.Timeout) cancels the handler's context; the
// attempt fails with `job timed out after …`". Every test of either set
// its own value; none held the defaults a new user gets. (A probe: both
// hold.)
func TestReviewNewUserAJobGets25AttemptsAndAMinuteByDefault(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[noop]) error {
			<-ctx.Done() // a handler stuck on a call that honours its context
			return ctx.Err()
		}))
		id := h.enqueue(noop{})
		require.Equal(t, 25, h.job(id).MaxAttempts)

		// The heartbeat (60 s by default) is moved out of the way: the one
		// timer due at a minute is then the run's timeout.
		w := h.worker(jobs.WorkerConfig{HeartbeatInterval: time.Hour, DeadAfter: 3 * time.Hour})
		done := make(chan jobs.DrainResult, 1)
		go func() {
			res, err := w.Drain(context.Background())
			assertNoErr(t, err)
			done <- res
		}()
		select {
		case <-h.clock.WaitForTimerAt(t0.Add(time.Minute)):
		case <-time.After(30 * time.Second):
			t.Fatal("no timer for the default timeout of a minute")
		}
		h.clock.Advance(time.Minute)
		require.Equal(t, 1, receive(t, done, 1)[0].Retried)
		j := h.job(id)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "job timed out after 1m0s: context canceled", j.LastError)
	})
}
