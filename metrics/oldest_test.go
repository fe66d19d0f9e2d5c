package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
)

// recurring.md: "`sluice_oldest_waiting_job_age_seconds{queue,throttled}`
// — the oldest job waiting to run … **Alert on `throttled="false"`**".
// A job enqueued to run in an hour has waited to run for nothing when it
// becomes due; the gauge must not say it has waited an hour (which would
// fire a stuck-queue alert for every scheduled job and every retry).
func TestOldestWaitingAgeCountsFromWhenTheJobCouldRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		_, err := client.Enqueue(ctx, ping{N: 1}, jobs.RunAt(t0.Add(time.Hour)))
		require.NoError(t, err)

		c.Advance(time.Hour) // due now; the dispatcher makes it ready
		n, _, err := s.Promote(ctx, engine.At(c.Now()), 500)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_oldest_waiting_job_age_seconds Age of the oldest job waiting to run, by queue, split by whether a limit holds it (throttled: waiting on a rate limit or a concurrency slot). Alert on throttled="false": a throttled backlog is a limit working.
# TYPE sluice_oldest_waiting_job_age_seconds gauge
sluice_oldest_waiting_job_age_seconds{queue="default",throttled="false"} 0
`), "sluice_oldest_waiting_job_age_seconds"))
	})
}

// A scrape while the database cannot be read fails (the registry's Gather
// returns the error, promhttp answers 500), rather than panicking or
// reporting an empty queue.
func TestAScrapeOfAnUnreadableDatabaseFails(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.Open(t)
			m := metrics.New(testdb.Public(s), metrics.Config{ScrapeTimeout: 2 * time.Second})
			reg := prometheus.NewRegistry()
			require.NoError(t, reg.Register(m))
			jr := jobs.NewRegistry()
			require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
			_, err := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{}).Enqueue(ctx, ping{N: 1})
			require.NoError(t, err)
			require.Equal(t, 1, testutil.CollectAndCount(m, "sluice_oldest_waiting_job_age_seconds"))
			require.NoError(t, s.Close())
			mfs, err := reg.Gather()
			require.Error(t, err)
			for _, mf := range mfs {
				require.NotEqual(t, "sluice_jobs", mf.GetName(), "no depth is reported when it could not be read")
			}
		})
	}
}

// recurring.md: a job no limit holds "is 0 s old until it comes due, and
// ages from then whether or not a dispatcher has made it ready";
// operations.md: "alert on
// sluice_oldest_waiting_job_age_seconds{throttled="false"}". A delayed job
// reads 0 until it is due; once it came due an hour ago and nothing made
// it ready (no worker and no dispatcher is up: the very stuck queue the
// alert is for), it has waited to run for an hour.
func TestOldestWaitingSeesADueJobNoOneMadeReady(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		_, err := client.Enqueue(ctx, ping{N: 1}, jobs.Delay(time.Minute))
		require.NoError(t, err)

		require.Equal(t, map[string]float64{"queue=default,throttled=false": 0}, gauges(t, reg, "sluice_oldest_waiting_job_age_seconds"),
			"not due yet")
		c.Advance(time.Hour + time.Minute) // due an hour ago; no process is up to promote it
		got := gauges(t, reg, "sluice_oldest_waiting_job_age_seconds")
		t.Logf("sluice_oldest_waiting_job_age_seconds: %v; sluice_jobs: %v", got, gauges(t, reg, "sluice_jobs"))
		require.Equal(t, map[string]float64{"queue=default,throttled=false": 3600}, got,
			"the job has waited to run for an hour")
	})
}
