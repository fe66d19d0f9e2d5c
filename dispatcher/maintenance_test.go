package dispatcher_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// The hourly clean-up deletes finished jobs in batches for as long as there
// are any: hundreds of thousands after a busy day. A running dispatcher
// keeps promoting due jobs meanwhile, and runs the clean-up again, once,
// when it has ended.
func TestARunningDispatcherPromotesWhileItCleansUp(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rs, rec := testdb.Record(s)
		var once sync.Once
		var cleanups atomic.Int32
		again := make(chan struct{})
		cleaning, release := make(chan struct{}), make(chan struct{})
		defer once.Do(func() { close(release) })
		rec.Before = func(q string) {
			// The clean-up's last statement, outside any transaction (a
			// blocked batch would hold SQLite's one writer lock).
			if strings.HasPrefix(q, "DELETE FROM sluice_recurring_runs") {
				if cleanups.Add(1) == 2 {
					close(again)
				}
				select {
				case cleaning <- struct{}{}:
					<-release // a long clean-up
				default:
				}
			}
		}
		start := t0.Add(59 * time.Minute) // the hourly clean-up's tick is a minute away
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
		due, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1,
			RunAt: t0.Add(time.Hour + time.Second)}})
		require.NoError(t, err)
		for i := 0; ; i++ {
			require.Less(t, i, 20, "a job came due while the clean-up ran, and was not promoted")
			at := c.Now().Add(time.Second)
			select {
			case <-c.WaitForTimerAt(at): // the dispatcher waits for its next round
			case <-time.After(5 * time.Second):
				t.Fatal("the dispatcher's round waits for the clean-up")
			}
			c.Set(at)
			j, err := s.GetJob(ctx, due[0].ID)
			require.NoError(t, err)
			if j.State == engine.StateReady {
				break
			}
		}
		once.Do(func() { close(release) })

		// Once it has ended, the clean-up waits for its next hour: the
		// rounds after it do not run it again.
		round := func() {
			at := c.Now().Add(time.Second)
			select {
			case <-c.WaitForTimerAt(at):
			case <-time.After(5 * time.Second):
				t.Fatal("the dispatcher's round did not come")
			}
			c.Set(at)
		}
		for range 5 {
			round()
		}
		require.EqualValues(t, 1, cleanups.Load(), "one clean-up for the hour's tick")
		c.Set(t0.Add(2*time.Hour - time.Second))
		round() // the next hour's tick
		select {
		case <-again:
		case <-time.After(30 * time.Second):
			t.Fatal("the next hour's clean-up did not run")
		}
		cancel()
		require.NoError(t, <-done)
	})
}
