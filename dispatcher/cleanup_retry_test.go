package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// recurring.md, "Housekeeping": sluice.clear_finished_jobs "deletes
// completed and cancelled jobs older than the retention"; the clean-ups
// "work in batches until nothing is left"; dispatcher/recurring.go says of
// a task that failed: "the same tick is tried again on the next round".
//
// A built-in clean-up records its tick in a transaction of its own, then
// works. When the work failed (the database went away for a moment), the
// next round found the tick recorded and moved on: the clean-up was not
// tried again until the next hour, whatever the dispatcher's rounds. The
// dispatcher that recorded the tick now owes its work, and runs it again
// on each round until it succeeds.
func TestAFailedCleanUpIsTriedAgainOnTheNextRound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
		require.NoError(t, err)
		id := res[0].ID
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: []engine.Run{{ID: id, Claim: 1}}}))

		db := &flakyCleanUpDB{DB: s.DB()}
		c := clock.NewFake(t0) // 12:00: the first hourly tick is 13:00
		d := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(),
			Maintenance: dispatcher.Maintenance{Retention: 30 * time.Minute,
				ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}, FreeExpiredSlots: dispatcher.MaintenanceTask{Off: true}}})
		c.Advance(time.Hour)
		db.fail.Store(true)
		_, err = d.Tick(ctx)
		require.Error(t, err, "the clean-up failed")
		require.True(t, db.failed.Load())
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateCompleted, j.State, "still there")

		// The database is back; the next round, a second later.
		db.fail.Store(false)
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, engine.ErrNotFound, "the failed clean-up is tried again and deletes the job finished 1 h ago (retention 30 min)")
	})
}

// flakyCleanUpDB fails, while fail is set, the clean-up's read of finished
// jobs (or, when stmt is set, the statements of its transactions that
// contain stmt), as a dropped connection would.
// reads counts those that went through.
type flakyCleanUpDB struct {
	engine.DB
	stmt         string
	fail, failed atomic.Bool
	reads        atomic.Int32
}

// finishedJobsRead starts the clean-up's read of finished jobs.
const finishedJobsRead = "SELECT id, calls FROM sluice_jobs"

// matches reports whether q is a statement d fails.
func (d *flakyCleanUpDB) matches(q string) bool {
	if d.stmt == "" {
		return strings.HasPrefix(strings.TrimSpace(q), finishedJobsRead)
	}
	return strings.Contains(q, d.stmt)
}

func (d *flakyCleanUpDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &flakyCleanUpTx{Tx: tx, db: d}, nil
}

type flakyCleanUpTx struct {
	engine.Tx
	db *flakyCleanUpDB
}

func (t *flakyCleanUpTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if t.db.matches(q) {
		if t.db.fail.Load() {
			t.db.failed.Store(true)
			return nil, errors.New("read tcp 10.0.0.7:5432: connection reset by peer")
		}
		t.db.reads.Add(1)
	}
	return t.Tx.Query(ctx, q, args...)
}

// finishedJob enqueues a job and completes it at t0, for a clean-up to
// delete.
func finishedJob(t *testing.T, s *engine.Store) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
	require.NoError(t, err)
	id := res[0].ID
	pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
	require.NoError(t, err)
	cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
	require.NoError(t, err)
	require.Len(t, cl.Jobs, 1)
	require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: []engine.Run{{ID: id, Claim: 1}}}))
	return id
}

// onlyClearFinished is the maintenance of these tests: the finished jobs'
// clean-up alone, with a retention of 30 minutes.
var onlyClearFinished = dispatcher.Maintenance{Retention: 30 * time.Minute,
	ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}, FreeExpiredSlots: dispatcher.MaintenanceTask{Off: true}}

// The tick a failed clean-up owes is the dispatcher's that recorded it:
// another dispatcher's round finds the tick recorded and leaves it (the
// work runs in one dispatcher per tick, as before), and the one that
// recorded it runs the work again.
func TestAFailedCleanUpIsTriedAgainByTheDispatcherThatRecordedItsTick(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := finishedJob(t, s)
		db := &flakyCleanUpDB{DB: s.DB()}
		c := clock.NewFake(t0)
		a := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		b := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour)
		db.fail.Store(true)
		_, err := a.Tick(ctx)
		require.Error(t, err, "the clean-up failed")
		db.fail.Store(false)

		_, err = b.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, id)
		require.NoError(t, err, "the other dispatcher finds the tick recorded and leaves its work to the one that recorded it")

		c.Advance(time.Second)
		_, err = a.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, engine.ErrNotFound, "the dispatcher that recorded the tick runs its work again")
		require.Equal(t, int32(1), db.reads.Load())
	})
}

// A clean-up that failed until its next tick came runs for that tick,
// recorded anew, not for the one it owed: another dispatcher finds the new
// tick recorded.
func TestAFailedCleanUpRecordsTheNextTickWhenItComes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := finishedJob(t, s)
		db := &flakyCleanUpDB{DB: s.DB()}
		c := clock.NewFake(t0)
		d := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour) // 13:00
		db.fail.Store(true)
		_, err := d.Tick(ctx)
		require.Error(t, err, "the clean-up failed")
		db.fail.Store(false)
		c.Advance(time.Hour + time.Second) // 14:00:01
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, engine.ErrNotFound)
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.Equal(t, t0.Add(2*time.Hour), last[dispatcher.TaskClearFinishedJobs].RunAt.UTC(), "the 14:00 tick is recorded")
	})
}

// Under Run, the hourly clean-ups run beside the rounds: one that failed
// there is tried again on a round after it reported, too.
func TestAFailedCleanUpUnderRunIsTriedAgainOnALaterRound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := finishedJob(t, s)
		db := &flakyCleanUpDB{DB: s.DB()}
		c := clock.NewFake(t0)
		d := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour) // 13:00
		db.fail.Store(true)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		require.Eventually(t, db.failed.Load, 30*time.Second, time.Millisecond, "the clean-up ran, and failed")
		db.fail.Store(false)
		// The rounds go on, a second apart; a later one runs the clean-up
		// again. Ten minutes of them at most: the next tick is an hour on.
		now := c.Now()
		for i := 0; i < 600 && db.reads.Load() == 0; i++ {
			now = now.Add(time.Second)
			select {
			case <-c.WaitForTimerAt(now):
			case <-time.After(30 * time.Second):
				t.Fatalf("no round at %s", now.Format(time.TimeOnly))
			}
			c.Advance(time.Second)
		}
		require.Positive(t, db.reads.Load(), "the clean-up was tried again within ten minutes of rounds")
		require.Eventually(t, func() bool {
			_, err := s.GetJob(ctx, id)
			return errors.Is(err, engine.ErrNotFound)
		}, 30*time.Second, time.Millisecond, "and deleted the job finished an hour ago")
		cancel()
		require.NoError(t, <-done)
	})
}
