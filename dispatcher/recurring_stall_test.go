package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/recurring.md, "Exactly once per tick": "however many dispatchers
// run, only the first to reach a tick enqueues it; the others find the
// record and move on", and "one that catches up after a long stall runs
// only the latest tick that has passed (if nobody ran it)".
//
// The hourly clean-up deletes tick records older than a week
// (DeleteTicks, before now − max(Retention, 7 days)), whatever the task's
// schedule. It deleted a monthly task's tick a week after it ran: a second
// dispatcher that stalled over it (a suspended VM, a frozen process) and
// caught up found no record of the latest tick and enqueued it again,
// eight days late, and `myapp recurring` (Dispatcher.Tasks) showed no last
// run for the task, though it ran. The clean-up keeps each task's latest
// record, however old.
func TestAStalledDispatcherDoesNotRunAgainAMonthlyTickAnotherRan(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 2026-03-01 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "monthly", Schedule: "0 0 1 * *", Args: report{Period: "month"}}}}
		stalled := newDispatcher(t, s, cfg)
		live := newDispatcher(t, s, cfg)
		sched, err := dispatcher.ParseSchedule("0 0 1 * *")
		require.NoError(t, err)
		tick := sched.Next(t0) // April 1st, 00:00

		c.Set(tick)
		_, err = live.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "the live dispatcher runs April 1st")
		c.Set(tick.Add(8 * 24 * time.Hour)) // April 9th: its hourly clean-up runs
		_, err = live.Tick(ctx)
		require.NoError(t, err)

		infos, err := live.Tasks(ctx)
		require.NoError(t, err)
		for _, i := range infos {
			if i.Key == "monthly" && !i.Last.RunAt.Equal(tick) {
				t.Errorf("the task's last run is listed as %v; want April 1st, when it ran", i.Last.RunAt)
			}
		}

		c.Advance(time.Second)
		_, err = stalled.Tick(ctx) // caught up after a stall over April 1st
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "April 1st ran once, by the live dispatcher; the stalled one must not run it again")
	})
}
