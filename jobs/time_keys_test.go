package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/jobs"
)

type tkDay struct{ Day time.Time }

func (tkDay) Kind() string { return "tk_day" }

// rate-limits.md (Keys): a time.Time key is its instant, in UTC, RFC 3339
// with nanoseconds. It used to be its String, which carries its location's
// name and any monotonic reading: the args a job's handler receives
// (decoded from JSON, the zone a fixed offset with no name) gave another
// key than the args it was enqueued with, and so did the same instant in
// UTC. A handler that enqueued a follow-up with j.Args (or a process in
// another zone) landed outside the coalesce key (and, keyed the same way,
// outside the budget or the concurrency slot) of the job that held that
// very day.
func TestATimeKeyNamesTheInstantNotItsLocation(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		received := make(chan tkDay, 1)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[tkDay]) error { received <- j.Args; return nil },
			jobs.Coalesce(coalesce.Rule[tkDay]{Key: func(a tkDay) any { return a.Day }})))
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		day := time.Date(2026, 3, 1, 0, 0, 0, 0, paris)
		ctx := context.Background()

		// The args a handler receives.
		h.enqueue(tkDay{Day: day})
		h.drain(jobs.WorkerConfig{})
		got := <-received
		require.True(t, got.Day.Equal(day))

		first, err := h.client.Enqueue(ctx, tkDay{Day: day})
		require.NoError(t, err)
		require.Equal(t, []int64{first.ID}, jobIDs(t, h.store,
			"SELECT id FROM sluice_jobs WHERE coalesce_key = 'tk_day/2026-02-28T23:00:00Z' AND state <> 'completed'"),
			"the key is the instant in UTC")
		again, err := h.client.Enqueue(ctx, got)
		require.NoError(t, err)
		require.True(t, again.Joined, "the args the handler received (%s) make another key than those it was enqueued with (%s)", got.Day, day)
		require.Equal(t, first.ID, again.ID)
		utc, err := h.client.Enqueue(ctx, tkDay{Day: day.UTC()})
		require.NoError(t, err)
		require.True(t, utc.Joined, "the same instant in UTC (%s) makes another key than %s", day.UTC(), day)
		withMonotonic := time.Now()
		now, err := h.client.Enqueue(ctx, tkDay{Day: withMonotonic})
		require.NoError(t, err)
		nowAgain, err := h.client.Enqueue(ctx, tkDay{Day: withMonotonic.Round(0).In(paris)})
		require.NoError(t, err)
		require.True(t, nowAgain.Joined, "a monotonic reading is not part of the key")
		require.Equal(t, now.ID, nowAgain.ID)

		// Another instant is another key.
		next, err := h.client.Enqueue(ctx, tkDay{Day: day.Add(time.Nanosecond)})
		require.NoError(t, err)
		require.False(t, next.Joined)
	})
}
