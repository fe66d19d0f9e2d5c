package jobstest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
)

type welcome struct {
	UserID int64 `json:"user_id"`
}

func (welcome) Kind() string { return "welcome" }

// fakeT records a failure instead of stopping the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func begin(t *testing.T, s *engine.Store) (tx any, rollback func()) {
	ctx := context.Background()
	switch db := s.DB().(type) {
	case *postgres.DB:
		tx, err := db.Pool().Begin(ctx)
		require.NoError(t, err)
		return tx, func() { _ = tx.Rollback(ctx) }
	case *sqldb.DB:
		tx, err := db.SQL().BeginTx(ctx, &sql.TxOptions{})
		require.NoError(t, err)
		return tx, func() { _ = tx.Rollback() }
	}
	t.Fatalf("unknown DB %T", s.DB())
	return nil, nil
}

func TestRequireEnqueuedSeesATransactionsJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[welcome](reg, jobs.Queue("mail")))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		tx, rollback := begin(t, s)
		_, err := c.EnqueueTx(context.Background(), tx, welcome{UserID: 42}, jobs.Priority(2))
		require.NoError(t, err)

		two := 2
		j := jobstest.RequireEnqueued(t, c, tx, welcome{UserID: 42}, jobstest.Want{Queue: "mail", Priority: &two, State: engine.StateReady})
		require.Equal(t, int64(42), j.Args.UserID)

		ft := &fakeT{TB: t}
		jobstest.RequireEnqueued(ft, c, tx, welcome{UserID: 7})
		require.Contains(t, ft.failed, `no welcome job enqueued with args {"user_id":7}`)
		ft = &fakeT{TB: t}
		jobstest.RequireEnqueued(ft, c, tx, welcome{UserID: 42}, jobstest.Want{Queue: "other"})
		require.Contains(t, ft.failed, "no welcome job enqueued")

		rollback()
		ft = &fakeT{TB: t}
		jobstest.RequireEnqueued(ft, c, nil, welcome{UserID: 42})
		require.Contains(t, ft.failed, "enqueued: none", "a rolled-back enqueue is gone")
	})
}

func TestPerformAndDrain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		reg := jobs.NewRegistry()
		var seen []int64
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[welcome]) error {
			seen = append(seen, j.Args.UserID)
			if j.Args.UserID == 0 {
				return errors.New("no user")
			}
			return nil
		}, jobs.Backoff(func(int) time.Duration { return time.Minute })))
		require.NoError(t, jobs.Perform(ctx, reg, welcome{UserID: 1}))
		require.ErrorContains(t, jobs.Perform(ctx, reg, welcome{}), "no user")

		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: clk})
		_, err := c.EnqueueMany(ctx, []jobs.Item{{Args: welcome{UserID: 2}}, {Args: welcome{}}})
		require.NoError(t, err)
		res := jobstest.Drain(ctx, t, testdb.Public(s), reg, clk)
		require.Equal(t, jobs.DrainResult{Completed: 1, Retried: 1}, res)
		require.Zero(t, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Ran(), "the retry is a minute away")
		clk.Advance(time.Minute)
		require.Equal(t, 1, jobstest.Drain(ctx, t, testdb.Public(s), reg, clk).Retried)
		require.Equal(t, []int64{1, 0, 2, 0, 0}, seen)
	})
}
