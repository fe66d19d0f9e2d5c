package jobstest_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
)

type rlAccount struct {
	AccountID int64 `json:"account_id"`
}

func (rlAccount) Kind() string { return "rl_account" }

// RequireEnqueued compares args as JSON with numbers by their exact
// value: two int64 ids above 2^53 (snowflake ids) that differ in their low
// bits are told apart. (Decoded into float64s, they compared equal, and
// an assertion on the wrong account passed.)
func TestRequireEnqueuedTellsLargeIntegerArgsApart(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[rlAccount](reg))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		const enqueued = int64(1)<<53 + 1 // 9007199254740993
		_, err := c.Enqueue(context.Background(), rlAccount{AccountID: enqueued})
		require.NoError(t, err)

		ft := &fakeT{TB: t}
		j := jobstest.RequireEnqueued(ft, c, nil, rlAccount{AccountID: enqueued - 1})
		require.NotEmpty(t, ft.failed,
			"RequireEnqueued(account %d) passed, returning the job of account %d: no such job was enqueued",
			enqueued-1, j.Args.AccountID)
		got := jobstest.RequireEnqueued(t, c, nil, rlAccount{AccountID: enqueued})
		require.Equal(t, enqueued, got.Args.AccountID)
	})
}

// RequireEnqueued searches every job of the kind, not only the 1000
// newest that Enqueued returns: a test of a backfill can assert its first
// job.
func TestRequireEnqueuedFindsAJobOlderThanTheThousandNewest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[rlAccount](reg))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		items := make([]jobs.Item, 1001)
		for i := range items {
			items[i] = jobs.Item{Args: rlAccount{AccountID: int64(i)}}
		}
		_, err := c.EnqueueMany(context.Background(), items)
		require.NoError(t, err)

		ft := &fakeT{TB: t}
		jobstest.RequireEnqueued(ft, c, nil, rlAccount{AccountID: 0})
		require.Empty(t, ft.failed, "the first of 1001 jobs was enqueued, yet RequireEnqueued failed")
	})
}

// A failed RequireEnqueued says what it looked for: the wanted
// priority by its value (Want.Priority is a *int, which %+v printed as an
// address).
func TestRequireEnqueuedFailureNamesTheWantedPriority(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[rlAccount](reg))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		_, err := c.Enqueue(context.Background(), rlAccount{AccountID: 1})
		require.NoError(t, err)

		two := 2
		ft := &fakeT{TB: t}
		jobstest.RequireEnqueued(ft, c, nil, rlAccount{AccountID: 1}, jobstest.Want{Priority: &two})
		require.NotEmpty(t, ft.failed)
		require.NotRegexp(t, regexp.MustCompile(`Priority:0x[0-9a-f]+`), ft.failed, "the message prints the wanted priority's address")
		require.Contains(t, ft.failed, "priority 2", "the message names the wanted priority: %s", ft.failed)
	})
}
