package dispatcher_test

import (
	"context"
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

// A clean-up that Run started in the background and that ended as Run
// stopped is never run again by the same dispatcher: its task stays marked
// busy. Tick's doc says a Tick called on its own runs every task whose tick
// has come before it returns; the next hour's clean-up does not run.
func TestACleanUpInFlightWhenRunStopsIsNotLeftBusy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rs, rec := testdb.Record(s)
		var cleanups atomic.Int32
		cleaning, release := make(chan struct{}, 1), make(chan struct{})
		rec.Before = func(q string) {
			if strings.HasPrefix(q, "DELETE FROM sluice_recurring_runs") {
				if cleanups.Add(1) == 1 {
					cleaning <- struct{}{}
					<-release
				}
			}
		}
		start := t0.Add(59 * time.Minute)
		c := clock.NewFake(start)
		d := newDispatcher(t, rs, dispatcher.Config{Clock: c, Logger: quiet(), Interval: time.Second,
			Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}}})
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()

		<-c.WaitForTimerAt(start.Add(time.Second)) // the first round is over
		c.Set(t0.Add(time.Hour))                   // the clean-up's tick
		select {
		case <-cleaning:
		case <-time.After(30 * time.Second):
			t.Fatal("the clean-up did not start")
		}
		cancel() // the dispatcher is stopped while the clean-up runs
		close(release)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return")
		}
		require.EqualValues(t, 1, cleanups.Load())

		// The next hour: a Tick on its own runs every task whose tick came.
		c.Set(t0.Add(2 * time.Hour))
		_, err := d.Tick(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 2, cleanups.Load(), "the next hour's clean-up did not run: the task is still marked busy")
	})
}
