package dispatcher_test

// Lost replies and failures on the hourly clean-ups' paths: the record of
// a clean-up's tick, and a batch of its work. replyLossDB
// (lost_replies_test.go) commits and then reports a dropped connection.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// recurring.md, "Housekeeping": the clean-ups "record their ticks like any
// task, so they run once per tick however many dispatchers run"; the
// dispatcher that recorded the tick, or may have (its record's commit
// failed unseen), owes it and runs the clean-up on its next rounds until it
// succeeds.
//
// The record of the clean-up's tick lands, its reply lost. The dispatcher
// sees the record fail with its outcome unknown, so it owes the tick; on
// its next round it finds the tick recorded and runs the clean-up, while
// the other dispatcher finds the tick recorded and leaves it: the job
// finished 1 h ago (retention 30 min) is deleted within a minute of rounds
// of both dispatchers, not left until the next tick, an hour on.
func TestACleanUpWhoseTickRecordReplyIsLostStillRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := finishedJob(t, s)
		ls, db := lossy(s)
		db.lose = loseOnce("INSERT INTO sluice_recurring_runs")
		c := clock.NewFake(t0)
		a := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		b := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour) // 13:00, the hourly tick
		_, err := a.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the tick's record landed, its reply lost")
		require.Equal(t, 1, db.lostReplies())
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.Equal(t, t0.Add(time.Hour), last[dispatcher.TaskClearFinishedJobs].RunAt, "the tick is recorded")

		// Both dispatchers go on ticking, a second at a time, for a
		// minute: the tick is recorded, so whichever recorded it must run
		// its clean-up.
		for range 60 {
			c.Advance(time.Second)
			_, err = a.Tick(ctx)
			require.NoError(t, err)
			_, err = b.Tick(ctx)
			require.NoError(t, err)
		}
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, engine.ErrNotFound,
			"the 13:00 clean-up ran: the job finished at 12:00 (retention 30 min) is gone by 13:01")
	})
}

// recurring.md, "Housekeeping": "Each batch it deleted stays deleted; the
// next try goes on from there." A batch of the finished jobs' clean-up
// whose commit lands and whose reply is lost fails the clean-up, which the
// dispatcher that recorded the tick owes and runs again on its next
// round: the rest is deleted, no job but the finished ones.
func TestACleanUpBatchWhoseReplyIsLostIsGoneOnFromOnTheNextRound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		finished := []int64{finishedJob(t, s), finishedJob(t, s)}
		kept := scheduled(t, s, 1, t0.Add(48*time.Hour))[0]
		ls, db := lossy(s)
		db.lose = loseOnce("DELETE FROM sluice_jobs")
		c := clock.NewFake(t0)
		d := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.ErrorIs(t, err, errReset)
		require.Equal(t, 1, db.lostReplies())
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		for _, id := range finished {
			_, err = s.GetJob(ctx, id)
			require.ErrorIs(t, err, engine.ErrNotFound)
		}
		_, err = s.GetJob(ctx, kept)
		require.NoError(t, err, "a job not finished is kept")
	})
}

// recurring.md, "Housekeeping": a record that fails and rolls back owes
// nothing, "and the next round, here or in another dispatcher, records
// the tick and runs it". The record's statement fails before it is sent:
// the other dispatcher records the tick and runs the clean-up, and the
// first, finding the tick recorded on its next round, leaves it: a job
// finished before the tick, and not deleted by then, stays until the
// next tick, as it would with one dispatcher.
func TestACleanUpWhoseTickRecordRolledBackIsLeftToTheDispatcherThatRecordsIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		first := finishedJob(t, s)
		ls, db := lossy(s)
		db.fail = loseOnce("INSERT INTO sluice_recurring_runs")
		c := clock.NewFake(t0)
		a := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		b := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour) // 13:00, the hourly tick
		_, err := a.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the tick's record failed")
		require.NotErrorIs(t, err, engine.ErrTickUnknown, "before its commit: it rolled back")
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.True(t, last[dispatcher.TaskClearFinishedJobs].RunAt.IsZero(), "no tick is recorded")

		_, err = b.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, first)
		require.ErrorIs(t, err, engine.ErrNotFound, "the other dispatcher recorded the tick and ran the clean-up")

		second := finishedJob(t, s)
		for range 60 {
			c.Advance(time.Second)
			_, err = a.Tick(ctx)
			require.NoError(t, err)
		}
		_, err = s.GetJob(ctx, second)
		require.NoError(t, err, "the first dispatcher owes nothing: it left the recorded tick to the other")
	})
}
