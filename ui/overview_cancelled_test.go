package ui_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

type heldBacklog struct{ N int }

func (heldBacklog) Kind() string { return "held_backlog" }

// docs/dashboard.md: the Overview shows each queue's "completed and
// failed per second over the last minute". An operator who cancels a
// paused queue's backlog (60 jobs, none of which ever ran) saw the queue
// complete 1.00/s: the overview summed every finished state that is not
// failed (FinishedSince returns cancelled rows too) as completed.
func TestOverviewDoesNotCountCancelledJobsAsCompleted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		f := &fixture{store: s, reg: jobs.NewRegistry(), clock: clock.NewFake(t0)}
		f.client = jobs.NewClient(testdb.Public(s), f.reg, jobs.ClientConfig{Clock: f.clock})
		require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[heldBacklog]) error { return nil }, jobs.Queue("held")))
		var ids []int64
		for i := range 60 {
			res, err := f.client.Enqueue(ctx, heldBacklog{N: i})
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
		require.NoError(t, s.PauseQueue(ctx, "held", t0))
		moved, err := s.CancelJobs(ctx, engine.At(t0), ids, "backlog dropped")
		require.NoError(t, err)
		require.Len(t, moved, 60)
		f.clock.Advance(time.Second)

		c := serve(t, f, "", ui.Options{})
		code, body := c.get("/")
		require.Equal(t, 200, code)
		row := regexp.MustCompile(`(?s)<tr data-queue="held">.*?</tr>`).FindString(body)
		require.NotEmpty(t, row, "the overview lists queue held")
		m := regexp.MustCompile(`<td class="num">([0-9.]+/s / [0-9.]+/s)</td>`).FindStringSubmatch(row)
		require.NotNil(t, m, "the row shows completed / failed per second")
		require.Equal(t, "0.00/s / 0.00/s", m[1], "completed / failed (last min) of queue held: none of its jobs ran; 60 were cancelled by an operator")
	})
}
