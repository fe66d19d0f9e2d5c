package otelsluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

// A job retried after an hour has two run spans, each linked to the one
// enqueue span, with its attempt; sluice.job.latency measures each from
// the enqueue to its claim (0 s, then 3600 s on the fake clock), and
// every duration is non-negative.
func TestRetriedRunsLinkToTheirEnqueueAndLatencyCountsFromIt(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(_ context.Context, j *jobs.Job[mail]) error {
			if j.Attempt == 1 {
				return errors.New("try again")
			}
			return nil
		}, jobs.Backoff(func(int) time.Duration { return time.Minute })))
		_, err := e.client.Enqueue(context.Background(), mail{N: 1})
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
