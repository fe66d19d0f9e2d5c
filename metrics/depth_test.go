package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
	"github.com/sluicequeue/sluice/ratelimit"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// gauges returns the named gauge's series as "label=value,…" → value.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[strings.Join(ls, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

type depthProbe struct{}

func (depthProbe) Kind() string { return "depth_probe" }

type depthFair struct{ Tenant int }

func (depthFair) Kind() string { return "depth_fair" }

type oneSlot struct{ N int }

func (oneSlot) Kind() string { return "one_slot" }

// sluice_jobs{queue,state} is "the jobs not completed or cancelled, read at
// scrape": at a quiet point it equals a plain count of the jobs table, for
// every state a job can be in (ready plain, limited and fair; scheduled;
// parked plain and fair; blocked; running; failed), queue by queue. The
// probe job compares the two while it runs, so that one job is running.
func TestQueueDepthMatchesACountQuery(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(_ context.Context, j *jobs.Job[ping]) error {
			if j.Args.N < 0 {
				return errors.New("for good")
			}
			return nil
		}, jobs.MaxAttempts(1)))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Hour, Key: func(c charge) any { return c.Account }})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[depthFair]) error { return nil }, jobs.Queue("fair"),
			jobs.Fair(func(f depthFair) any { return f.Tenant }),
			jobs.RateLimit(ratelimit.Limit[depthFair]{To: 1, Per: time.Hour, Key: "all"})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[oneSlot]) error { return nil }, jobs.Queue("slots"),
			jobs.ConcurrencyLimit(concurrency.Limit[oneSlot]{Key: "one"})))
		var compared bool
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[depthProbe]) error {
			want := countByState(t, s)
			got := gauges(t, reg, "sluice_jobs")
			for k, v := range got {
				if v == 0 {
					delete(got, k)
				}
			}
			t.Logf("count query: %v", want)
			t.Logf("sluice_jobs: %v", got)
			require.Equal(t, want, got)
			compared = true
			return nil
		}, jobs.Queue("probe")))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		enqueue := func(a jobs.Args, opts ...jobs.EnqueueOption) {
			_, err := client.Enqueue(ctx, a, opts...)
			require.NoError(t, err)
		}
		// Failed for good, and run in a drain of its own queue first.
		enqueue(ping{N: -1})
		drain(t, s, jr, c, "default")
		for i := range 3 {
			enqueue(charge{Account: 1}) // one admitted, the rest parked (an hour's slot)
			enqueue(depthFair{Tenant: i % 2})
		}
		drain(t, s, jr, c, "default", "fair")
		enqueue(charge{Account: 2})                // ready, limited
		enqueue(depthFair{Tenant: 5})              // ready, fair
		enqueue(ping{N: 1})                        // ready, plain
		enqueue(ping{N: 2}, jobs.Delay(time.Hour)) // scheduled
		enqueue(oneSlot{N: 1})                     // holds the slot, ready
		enqueue(oneSlot{N: 2})                     // blocked
		enqueue(depthProbe{})
		drain(t, s, jr, c, "probe")
		require.True(t, compared, "the probe ran")
	})
}

// countByState counts the jobs not completed or cancelled by queue and
// state, as "queue=Q,state=S" → n.
func countByState(t *testing.T, s *engine.Store) map[string]float64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(),
		`SELECT queue, state, COUNT(*) FROM sluice_jobs WHERE state NOT IN ('completed', 'cancelled') GROUP BY queue, state`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var q, st string
		var n int64
		require.NoError(t, rows.Scan(&q, &st, &n))
		out[fmt.Sprintf("queue=%s,state=%s", q, st)] = float64(n)
	}
	require.NoError(t, rows.Err())
	return out
}

func drain(t *testing.T, s *engine.Store, jr *jobs.Registry, c clock.Clock, queues ...string) jobs.DrainResult {
	t.Helper()
	w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Queues: queues, Logger: quietLogger()})
	require.NoError(t, err)
	res, err := w.Drain(context.Background())
	require.NoError(t, err)
	return res
}
