package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A tick says it is full (Run ticks again at once, not an Interval later)
// when more due jobs may be there. It said so only when it promoted a
// whole batch; but a promotion passes, in up to four rounds, over the due
// jobs of keys whose semaphores other transactions hold (an app's open
// transaction that enqueued a job of the key), and one whose every round
// left such jobs behind promoted less than a batch while unlimited jobs
// stood due after them: the dispatcher waited a whole Interval for each
// few it promoted. The tick is now full when its promotion took jobs and
// its last round read all it asked for; a promotion that took none is
// never full, so keys held for the whole test, whose jobs fill every
// round of a tick, do not make Run tick again and again.
//
// Here the batch is 4 and an app's transaction holds keys h01 to h20 for
// the whole test. Due, soonest first: h01 h02 h03 u1 h04 u2 h05 h06 u3
// h07 u4 u5, then h08 to h20 (one job each; u are unlimited). The first
// tick's rounds read h01 h02 h03 u1 | h04 u2 h05 | h06 u3 | h07: three
// promoted, the last round full, so more may be due. The second's read
// h01-h04 | h05 h06 h07 u4 | u5 h08 h09 | h10 h11: two promoted, more may
// be due. The third's read only held keys' jobs, four rounds of four, and
// promote none: not full. SQLite has one writer, so no key is held while
// a tick runs: there every job is promoted (the held keys' blocked, their
// one slot the app's), and a tick is full when it took a whole batch.
func TestATickThatLeftJobsBehindHeldKeysTicksAgainAtOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		held := s.Dialect().Capabilities().RowLocks
		key := func(i int) string { return fmt.Sprintf("h%02d", i) }
		order := []string{"h01", "h02", "h03", "u", "h04", "u", "h05", "h06", "u", "h07", "u", "u"}
		for i := 8; i <= 20; i++ {
			order = append(order, key(i))
		}
		var jobs []engine.NewJob
		for i, k := range order {
			j := engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, RunAt: t0.Add(time.Duration(i+1) * time.Second)}
			if k != "u" {
				j.Conc = &engine.Conc{Key: k, To: 1, Duration: time.Hour}
			}
			jobs = append(jobs, j)
		}
		_, err := s.Enqueue(ctx, nil, engine.At(t0), jobs)
		require.NoError(t, err)

		// The app's transaction takes each key's one slot and, where rows
		// are locked, holds its semaphore until the end of the test.
		app := open()
		tx, err := app.DB().Begin(ctx)
		require.NoError(t, err)
		var mine []engine.NewJob
		for i := 1; i <= 20; i++ {
			mine = append(mine, engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1,
				Conc: &engine.Conc{Key: key(i), To: 1, Duration: time.Hour}})
		}
		_, err = app.Enqueue(ctx, tx, engine.At(t0), mine)
		require.NoError(t, err)
		if held {
			defer func() { _ = tx.Rollback(ctx) }()
		} else {
			require.NoError(t, tx.Commit(ctx)) // one writer: it cannot stay open
		}

		c := clock.NewFake(t0.Add(time.Minute))
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), BatchSize: 4, Interval: 7 * time.Second})
		type tick struct {
			Promoted int
			Full     bool
		}
		var got []tick
		for range 10 {
			res, err := d.Tick(ctx)
			require.NoError(t, err)
			got = append(got, tick{res.Promoted, res.Full})
			if !res.Full {
				break
			}
		}
		if held {
			require.Equal(t, []tick{{3, true}, {2, true}, {0, false}}, got,
				"each tick that took jobs left behind held keys is full; the one that took none is not")
		} else {
			require.Equal(t, []tick{{4, true}, {4, true}, {4, true}, {4, true}, {4, true}, {4, true}, {1, false}}, got)
		}
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		counts := st[0].Counts
		if held {
			require.Equal(t, map[engine.State]int64{engine.StateReady: 5, engine.StateScheduled: 20},
				map[engine.State]int64{engine.StateReady: counts[engine.StateReady], engine.StateScheduled: counts[engine.StateScheduled]},
				"every unlimited job is promoted; the held keys' jobs are left due")
		} else {
			require.Equal(t, map[engine.State]int64{engine.StateReady: 25, engine.StateBlocked: 20},
				map[engine.State]int64{engine.StateReady: counts[engine.StateReady], engine.StateBlocked: counts[engine.StateBlocked]},
				"every unlimited job is promoted (with the app's 20), and every key's due job is blocked behind the app's")
		}

		// Run over what is left ticks, finds only held keys' jobs (or
		// none), and waits its Interval: it does not tick again and again.
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		select {
		case <-c.WaitForTimerAt(c.Now().Add(7 * time.Second)):
		case <-time.After(10 * time.Second):
			t.Error("Run never waited for its Interval: it ticks again at once over the held keys' jobs")
		}
		cancel()
		require.NoError(t, <-done)
	})
}
