package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
	"github.com/sluicequeue/sluice/ratelimit"
)

type charge struct{ Account int }

func (charge) Kind() string { return "charge" }

type ping struct{ N int }

func (ping) Kind() string { return "ping" }

type refresh struct{ Shop int }

func (refresh) Kind() string { return "refresh" }

func TestMetricsCountAndScrape(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))

		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Hour, Key: "global", Group: "Stripe"})))
		require.NoError(t, jobs.Register(jr, func(_ context.Context, j *jobs.Job[ping]) error {
			if j.Args.N == 0 {
				return errors.New("nope")
			}
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[ping]{Key: "one"})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: func(r refresh) any { return r.Shop }}), jobs.Queue("other")))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
		for _, a := range []jobs.Args{charge{}, charge{}, ping{N: 1}, ping{N: 0}, refresh{Shop: 1}, refresh{Shop: 1}} {
			_, err := client.Enqueue(ctx, a)
			require.NoError(t, err)
		}
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_jobs_coalesced_total Enqueues that joined a pending job instead of adding one, by kind.
# TYPE sluice_jobs_coalesced_total counter
sluice_jobs_coalesced_total{kind="refresh"} 1
# HELP sluice_jobs_blocked_total Jobs blocked at enqueue because their concurrency key had no slot free, by kind.
# TYPE sluice_jobs_blocked_total counter
sluice_jobs_blocked_total{kind="ping"} 1
`), "sluice_jobs_coalesced_total", "sluice_jobs_blocked_total"))

		c.Advance(time.Minute) // the jobs are a minute old when the scrape reads them
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_oldest_waiting_job_age_seconds Age of the oldest job waiting to run, by queue, split by whether a limit holds it (throttled: waiting on a rate limit or a concurrency slot). Alert on throttled="false": a throttled backlog is a limit working.
# TYPE sluice_oldest_waiting_job_age_seconds gauge
sluice_oldest_waiting_job_age_seconds{queue="default",throttled="false"} 60
sluice_oldest_waiting_job_age_seconds{queue="default",throttled="true"} 60
sluice_oldest_waiting_job_age_seconds{queue="other",throttled="false"} 60
`), "sluice_oldest_waiting_job_age_seconds"))

		w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Hooks: m.Hooks(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Queues: []string{"default", "other"}})
		require.NoError(t, err)
		_, err = w.Drain(ctx)
		require.NoError(t, err)

		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_jobs_enqueued_total Jobs enqueued, by kind and by what became of them: created, joined (coalesced into a pending job), blocked (no concurrency slot) or discarded (no concurrency slot, under Discard: at the enqueue, or when a job that waited scheduled came due, which counted created too).
# TYPE sluice_jobs_enqueued_total counter
sluice_jobs_enqueued_total{kind="charge",result="created"} 2
sluice_jobs_enqueued_total{kind="ping",result="blocked"} 1
sluice_jobs_enqueued_total{kind="ping",result="created"} 1
sluice_jobs_enqueued_total{kind="refresh",result="created"} 1
sluice_jobs_enqueued_total{kind="refresh",result="joined"} 1
# HELP sluice_jobs_deferred_total Jobs a rate limit sent back to wait, by a claim or by a worker's sweep of a flood, by kind and by the limit (group or kind) that held them.
# TYPE sluice_jobs_deferred_total counter
sluice_jobs_deferred_total{kind="charge",limit="Stripe"} 1
# HELP sluice_jobs_finished_total Runs that ended, by kind and outcome: completed, retried, failed, cancelled, snoozed, throttled or released (at shutdown, while the handler still ran: counted once, at the release).
# TYPE sluice_jobs_finished_total counter
sluice_jobs_finished_total{kind="charge",outcome="completed"} 1
sluice_jobs_finished_total{kind="ping",outcome="completed"} 1
sluice_jobs_finished_total{kind="ping",outcome="retried"} 1
sluice_jobs_finished_total{kind="refresh",outcome="completed"} 1
# HELP sluice_jobs_claimed_total Jobs claimed by workers.
# TYPE sluice_jobs_claimed_total counter
sluice_jobs_claimed_total 4
`), "sluice_jobs_enqueued_total", "sluice_jobs_deferred_total", "sluice_jobs_finished_total", "sluice_jobs_claimed_total"))

		// What is left: the charge parked on its limit (an hour away, past
		// the horizon), the ping retrying.
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_jobs Jobs that are not completed or cancelled, by queue and state.
# TYPE sluice_jobs gauge
sluice_jobs{queue="default",state="blocked"} 0
sluice_jobs{queue="default",state="failed"} 0
sluice_jobs{queue="default",state="parked"} 1
sluice_jobs{queue="default",state="ready"} 0
sluice_jobs{queue="default",state="running"} 0
sluice_jobs{queue="default",state="scheduled"} 1
`), "sluice_jobs"))
		require.Equal(t, 1, testutil.CollectAndCount(m, "sluice_claim_duration_seconds"))
	})
}
