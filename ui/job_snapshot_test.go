package ui_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

// The job page's facts (its state, the slot it holds) and "Why it waits"
// come from one snapshot. While the page reads a blocked job's semaphore,
// another process cancels the job holding the key's one slot, which
// hands the slot to the job shown: the page shows it blocked in both
// places, not "blocked on concurrency key" beside a state of ready that
// holds a slot.
func TestTheJobPageShowsOneSnapshot(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		rs, rec := testdb.Record(s)
		f := &fixture{store: rs, reg: jobs.NewRegistry(), clock: clock.NewFake(t0)}
		f.client = jobs.NewClient(testdb.Public(rs), f.reg, jobs.ClientConfig{Clock: f.clock})
		require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[serial]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[serial]{To: 1, Key: func(a serial) any { return a.Account }})))
		var ids []int64
		for range 2 {
			res, err := f.client.Enqueue(ctx, serial{Account: "a"})
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
		holder, mine := ids[0], ids[1]
		j, err := s.GetJob(ctx, mine)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, j.State)

		other := open()
		d, ok := s.Dialect().(engine.DashboardDialect)
		require.True(t, ok)
		semaphoreRead, _ := d.GetSemaphore(j.ConcKey)
		armed := true
		var cancelErr error
		rec.Before = func(q string) {
			if !armed || q != semaphoreRead {
				return
			}
			armed = false
			_, cancelErr = other.CancelJobs(ctx, engine.At(t0), []int64{holder}, "")
		}
		c := serve(t, f, "", ui.Options{})
		code, body := c.get("/jobs/" + strconv.FormatInt(mine, 10))
		require.Equal(t, http.StatusOK, code, body)
		require.False(t, armed, "the page read the semaphore")
		require.NoError(t, cancelErr)
		after, err := s.GetJob(ctx, mine)
		require.NoError(t, err)
		require.True(t, after.HoldsSlot, "the cancel handed the slot on")

		require.Contains(t, body, "is blocked on concurrency key serial/a: 1 of 1 slot(s) held")
		require.Contains(t, body, "concurrency: key serial/a, 1 of 1 slot(s) held by job(s) ["+strconv.FormatInt(holder, 10)+"]</li>")
		require.Contains(t, body, `<td id="state">blocked (concurrency: serial/a)</td>`)
		require.NotContains(t, body, "(holds a slot)")
	})
}
