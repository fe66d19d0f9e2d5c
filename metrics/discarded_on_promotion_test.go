package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
)

type discardable struct{ N int }

func (discardable) Kind() string { return "discardable" }

// discardMetrics returns a fake clock, a Prometheus registry holding the
// store's metrics, and a client, counted by them, of kind discardable: a
// concurrency limit of one slot that discards a job finding it held.
func discardMetrics(t *testing.T, s *engine.Store) (*clock.Fake, *prometheus.Registry, *jobs.Client) {
	t.Helper()
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(m))
	jr := jobs.NewRegistry()
	require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[discardable]) error { return nil },
		jobs.ConcurrencyLimit(concurrency.Limit[discardable]{Key: "one", OnConflict: concurrency.Discard})))
	client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
	return c, reg, client
}

// sluice_jobs_enqueued_total{kind,result}: "Jobs enqueued, by kind and by
// what became of them: created, joined, blocked or discarded"
// (docs/recurring.md#metrics). A job of a concurrency limit with Discard,
// enqueued while its key's one slot is held, is counted discarded. The
// same job enqueued into a paused queue waits scheduled, holding no slot
// (docs/guarantees.md#queues), and is counted created; after the resume
// the dispatcher discards it ("promotes the due ones as it promotes any
// (a slot; with none free, blocked, or discarded under Discard)"). No
// counter, log or hook recorded that discard: the job was dropped
// silently, and the metrics said one job was created and nothing was
// discarded. The metrics now watch the store's promotions.
func TestAJobDiscardedAfterItsQueuesResumeIsCounted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c, reg, client := discardMetrics(t, s)
		discarded := map[string]string{"kind": "discardable", "result": "discarded"}

		// The holder, in queue open, takes the key's one slot.
		_, err := client.Enqueue(ctx, discardable{N: 0}, jobs.Queue("open"))
		require.NoError(t, err)
		// Without a pause: discarded at enqueue, and counted.
		res, err := client.Enqueue(ctx, discardable{N: 1}, jobs.Queue("open"))
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, res.State)
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", discarded))

		// Into a paused queue: it waits scheduled, then the resume's
		// promotion discards it.
		require.NoError(t, s.PauseQueue(ctx, "held", c.Now()))
		res, err = client.Enqueue(ctx, discardable{N: 2}, jobs.Queue("held"))
		require.NoError(t, err)
		require.Equal(t, engine.StateScheduled, res.State)
		require.NoError(t, s.ResumeQueue(ctx, "held", c.Now()))
		_, _, err = s.Promote(ctx, engine.At(c.Now()), 100)
		require.NoError(t, err)
		j, err := s.GetJob(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, j.State, "discarded: %s", j.LastError)
		require.Contains(t, j.LastError, engine.DiscardedError)

		require.EqualValues(t, 2, labelled(t, reg, "sluice_jobs_enqueued_total", discarded),
			"two jobs were discarded for want of a slot; the metrics count %v created",
			labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "discardable", "result": "created"}))
	})
}

// The same for a delayed job, discarded by a dispatcher's tick when it
// comes due with its key's slot held: the tick says so (TickResult:
// Promoted counts the due jobs it took, Discarded those it discarded),
// and the metrics of the process count it, created at its enqueue and
// discarded now.
func TestADelayedJobDiscardedByTheDispatcherIsCounted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c, reg, client := discardMetrics(t, s)
		d, err := dispatcher.New(testdb.Public(s), dispatcher.Config{Clock: c, Logger: quietLogger()})
		require.NoError(t, err)
		series := func(result string) float64 {
			return labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "discardable", "result": result})
		}

		_, err = client.Enqueue(ctx, discardable{N: 0}) // the holder
		require.NoError(t, err)
		later, err := client.Enqueue(ctx, discardable{N: 1}, jobs.Delay(time.Minute))
		require.NoError(t, err)
		require.Equal(t, engine.StateScheduled, later.State)
		require.EqualValues(t, 2, series("created"))

		c.Advance(time.Minute)
		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Promoted, "the due job was taken")
		require.Equal(t, 1, res.Discarded, "and discarded")
		j, err := s.GetJob(ctx, later.ID)
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, j.State)
		require.EqualValues(t, 1, series("discarded"))

		res, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Discarded)
		require.EqualValues(t, 1, series("discarded"), "counted once")
	})
}
