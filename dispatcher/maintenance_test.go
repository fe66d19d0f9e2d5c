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

// cleanUpRun is a dispatcher's Run whose first hourly clean-up of finished
// jobs blocks, as a long one would, until released.
type cleanUpRun struct {
	c        *clock.Fake
	d        *dispatcher.Dispatcher
	cleanups atomic.Int32 // clean-ups that reached their last statement
	again    chan struct{}
	release  func()
	stop     func() // cancels Run and waits for it to return
}

// startCleanUpRun starts Run a minute before the hourly clean-up's tick,
// moves the clock to it, and returns once the clean-up is blocked.
func startCleanUpRun(t *testing.T, s *engine.Store) *cleanUpRun {
	ctx, cancel := context.WithCancel(context.Background())
	rs, rec := testdb.Record(s)
	r := &cleanUpRun{again: make(chan struct{})}
	cleaning, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.release = func() { once.Do(func() { close(released) }) }
	rec.Before = func(q string) {
		// The clean-up's last read, outside any transaction (a blocked
		// batch would hold SQLite's one writer lock): the old tick
		// records it then deletes (none here).
		if strings.HasPrefix(q, "SELECT r.task, r.run_at FROM sluice_recurring_runs") { // OldTicks
			switch r.cleanups.Add(1) {
			case 1:
				cleaning <- struct{}{}
				<-released
			case 2:
				close(r.again)
			}
		}
	}
	start := t0.Add(59 * time.Minute)
	r.c = clock.NewFake(start)
	r.d = newDispatcher(t, rs, dispatcher.Config{Clock: r.c, Logger: quiet(), Interval: time.Second,
		Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}}})
	done := make(chan error, 1)
	go func() { done <- r.d.Run(ctx) }()
	var stopped bool
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		r.release()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	t.Cleanup(r.stop)

	<-r.c.WaitForTimerAt(start.Add(time.Second)) // the first round is over
	r.c.Set(t0.Add(time.Hour))                   // the clean-up's tick
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-cleaning:
			return r
		case <-deadline:
			t.Fatal("the clean-up did not start")
		case <-time.After(3 * time.Second):
			// A clean-up that failed before its last statement (SQLite
			// busy beside the round's own writes, on a loaded machine:
			// it failed so once under -race) runs its tick again at the
			// next round.
			r.round(t)
		}
	}
}

// round lets the dispatcher's next round come, a second on.
func (r *cleanUpRun) round(t *testing.T) {
	at := r.c.Now().Add(time.Second)
	select {
	case <-r.c.WaitForTimerAt(at):
	case <-time.After(5 * time.Second):
		t.Fatal("the dispatcher's round waits for the clean-up")
	}
	r.c.Set(at)
}

// The hourly clean-up deletes finished jobs in batches for as long as there
// are any: hundreds of thousands after a busy day. A running dispatcher
// keeps promoting due jobs meanwhile, and runs the clean-up again, once,
// at its next tick.
func TestARunningDispatcherPromotesWhileItCleansUp(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := startCleanUpRun(t, s)
		due, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1,
			RunAt: t0.Add(time.Hour + time.Second)}})
		require.NoError(t, err)
		for i := 0; ; i++ {
			require.Less(t, i, 20, "a job came due while the clean-up ran, and was not promoted")
			r.round(t)
			j, err := s.GetJob(ctx, due[0].ID)
			require.NoError(t, err)
			if j.State == engine.StateReady {
				break
			}
		}
		r.release()

		// Once it has ended, the clean-up waits for its next hour.
		for range 5 {
			r.round(t)
		}
		require.EqualValues(t, 1, r.cleanups.Load(), "one clean-up for the hour's tick")
		r.c.Set(t0.Add(2*time.Hour - time.Second))
		// The next hour's tick, and the rounds after it: the clean-up
		// released above may still be ending in the background (its last
		// statement, on a busy machine), and the round after its end runs
		// the tick.
		for i := 0; ; i++ {
			require.Less(t, i, 20, "the next hour's clean-up did not run")
			r.round(t)
			select {
			case <-r.again:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// A clean-up under way when Run stops is not left marked busy: a Tick of
// the same dispatcher at the next hour runs it, as a Tick on its own runs
// every task whose tick has come.
func TestACleanUpInFlightWhenRunStopsIsNotLeftBusy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := startCleanUpRun(t, s)
		r.stop() // while the clean-up runs
		require.EqualValues(t, 1, r.cleanups.Load())

		r.c.Set(t0.Add(2 * time.Hour))
		_, err := r.d.Tick(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 2, r.cleanups.Load(), "the next hour's clean-up did not run: the task is still marked busy")
	})
}
