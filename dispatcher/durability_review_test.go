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

// Probe (passes): guarantees.md, "A worker that dies ... Any live worker or
// dispatcher that finds a heartbeat older than 5 minutes (DeadAfter)
// releases that process's running jobs back to ready, counting the lost
// run as an attempt ..., and removes the process". A dispatcher alone,
// with no worker running, rescues a killed worker's job.
func TestReviewADispatcherAloneReleasesAKilledWorkersJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
		require.NoError(t, err)
		id := res[0].ID
		dead, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "killed", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)

		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Interval: time.Hour})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		for i := 1; i <= 5; i++ {
			<-c.WaitForTimerAt(t0.Add(time.Duration(i) * time.Minute)) // its heartbeat waits
			j, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, engine.StateRunning, j.State, "not presumed dead before DeadAfter (minute %d)", i-1)
			c.Advance(time.Minute)
		}
		<-c.WaitForTimerAt(t0.Add(6 * time.Minute))
		c.Advance(time.Minute)                      // 6 minutes: the killed worker's heartbeat is 6 minutes old
		<-c.WaitForTimerAt(t0.Add(7 * time.Minute)) // that beat is over
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, engine.LostError, j.LastError)
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the killed worker is removed; the dispatcher stays")
		require.Equal(t, d.ProcessID(), ps[0].ID)
		cancel()
		require.NoError(t, <-done)
	})
}

// recurring.md, "Housekeeping": sluice.clear_finished_jobs "deletes
// completed and cancelled jobs older than the retention"; the clean-ups
// "work in batches until nothing is left"; dispatcher/recurring.go says of
// a task that failed: "the same tick is tried again on the next round".
//
// A built-in clean-up records its tick in a transaction of its own, then
// works. When the work fails (the database went away for a moment), the
// next round finds the tick recorded and moves on: the clean-up is not
// tried again until the next hour, whatever the dispatcher's rounds.
func TestReviewAFailedCleanUpIsTriedAgainOnTheNextRound(t *testing.T) {
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
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: []int64{id}}))

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
// jobs, as a dropped connection would.
type flakyCleanUpDB struct {
	engine.DB
	fail, failed atomic.Bool
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
	if t.db.fail.Load() && strings.HasPrefix(strings.TrimSpace(q), "SELECT id, calls FROM sluice_jobs") {
		t.db.failed.Store(true)
		return nil, errors.New("read tcp 10.0.0.7:5432: connection reset by peer")
	}
	return t.Tx.Query(ctx, q, args...)
}
