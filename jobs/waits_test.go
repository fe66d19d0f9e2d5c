package jobs_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type waitJob struct{ N int }

func (waitJob) Kind() string { return "wait" }

// An upstream's Retry-After of more seconds than a Duration holds waits
// MaxRetryAfter: the product once wrapped round to a negative wait, and
// the job ran again at once.
func TestARetryAfterOfMoreSecondsThanADurationHoldsWaitsTheCap(t *testing.T) {
	d, ok := jobs.ParseRetryAfter("10000000000", t0)
	require.True(t, ok)
	assert.GreaterOrEqual(t, d, time.Duration(0), "ParseRetryAfter(10^10 s) is %s", d)

	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			if runs.Add(1) > 1 {
				return nil
			}
			resp := &http.Response{Header: http.Header{"Retry-After": []string{"10000000000"}}}
			return jobs.RetryAfterResponse(resp, time.Minute)
		}))
		id := h.enqueue(waitJob{})
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, int32(1), runs.Load(), "the throttled job ran again at once (state %s)", h.job(id).State)
		require.Equal(t, t0.Add(jobs.DefaultMaxRetryAfter), h.job(id).RunAt,
			"an upstream that asks for a very long wait gets MaxRetryAfter, not none")
	})
}

// guarantees.md, "Time": a wait a worker sends a job back with is
// counted from the database's clock. A snooze's run time was once the
// worker's clock plus the wait, compared with the database's clock at
// promotion: a worker a day behind saw a job it snoozed for an hour run
// again at once.
func TestASnoozeIsNotCutShortByAHostClockBehindTheDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		dbClock := clock.NewFake(t0)
		s := testdb.WithDatabaseClock(base, dbClock.Now)
		host := clock.NewFake(t0.Add(-24 * time.Hour))
		reg := jobs.NewRegistry()
		var runs atomic.Int32
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[waitJob]) error {
			if runs.Add(1) == 1 {
				return jobs.Snooze(time.Hour)
			}
			return nil
		}))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: host})
		res, err := client.Enqueue(context.Background(), waitJob{})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Clock: host, DatabaseClock: true, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.NoError(t, err)
		j, err := s.GetJob(context.Background(), res.ID)
		require.NoError(t, err)
		require.Equal(t, int32(1), runs.Load(), "snoozed for an hour, it ran again with no clock moved (state %s)", j.State)
		require.Equal(t, engine.StateScheduled, j.State)
	})
}
