package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
)

// A recurring task's tick that deadlocks after its enqueue (rolled back,
// and run again on the dispatcher's next round) counts its one job once in
// sluice_jobs_enqueued_total: the client's OnEnqueue, which the collector
// counts with, runs once the tick's transaction committed.
func TestARetriedTickIsCountedOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		s, faults := testdb.WithFaults(base)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
		d, err := dispatcher.New(testdb.Public(s), dispatcher.Config{Clock: c, Client: client,
			Logger: quietLogger(),
			Tasks:  []dispatcher.Task{{Key: "hourly-ping", Schedule: "@hourly", Args: ping{N: 1}}}})
		require.NoError(t, err)
		faults.FailOnce = "UPDATE sluice_recurring_runs SET job_id" // after the enqueue
		c.Advance(time.Hour)
		_, err = d.Tick(ctx)
		require.Error(t, err, "the tick deadlocked")
		require.Empty(t, faults.FailOnce, "the fault fired")
		require.Zero(t, sumCounter(t, reg, "sluice_jobs_enqueued_total"), "nothing committed, nothing counted")
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE kind = 'ping'`))
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "ping", "result": "created"}))
		require.EqualValues(t, 1, sumCounter(t, reg, "sluice_jobs_enqueued_total"))
	})
}
