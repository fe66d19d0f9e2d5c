package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type perAccount struct{ Account string }

func (perAccount) Kind() string { return "per_account" }

// "One job at a time per account" (concurrency.md) makes one
// sluice_semaphores row per account on its first job. None was ever
// deleted: every concurrency key ever used stayed, at 0 held and nothing
// blocked, listed by `sluice semaphores` and the dashboard, against
// DESIGN.md's "Cost when unused is zero". The dispatcher's hourly
// clear_idle_budgets task deletes the semaphore of a key that holds no
// slot, has no blocked job and saw no activity for an hour, as it deletes
// an idle budget; its next enqueue declares its limit again.
func TestIdleConcurrencyKeysAreNotKeptForever(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[perAccount]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[perAccount]{To: 1, Key: func(a perAccount) any { return a.Account }})))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})
		const accounts = 200
		items := make([]jobs.Item, accounts)
		for i := range items {
			items[i] = jobs.Item{Args: perAccount{Account: fmt.Sprintf("acct-%d", i)}}
		}
		_, err := client.EnqueueMany(ctx, items)
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Clock: c, Logger: quiet(), Concurrency: accounts})
		require.NoError(t, err)
		res, err := w.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, accounts, res.Completed)

		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client})
		for _, step := range []time.Duration{time.Hour, 24 * time.Hour, time.Hour} { // the hourly tasks, the day's retention
			c.Advance(step)
			_, err = d.Tick(ctx)
			require.NoError(t, err)
		}
		sems, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		idle := 0
		for _, sem := range sems {
			if sem.Held == 0 && sem.Blocked == 0 && sem.Holding == 0 {
				idle++
			}
		}
		require.Zero(t, idle, "%d of %d concurrency keys are kept with no holder and nothing waiting, a day after their last job", idle, len(sems))
	})
}
