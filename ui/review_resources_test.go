package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ui"
)

// rowCounter is a store pool that counts the rows its statements return,
// in its transactions too.
type rowCounter struct {
	engine.DB
	rows atomic.Int64
}

func (c *rowCounter) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	rs, err := c.DB.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return &countedRows{Rows: rs, n: &c.rows}, nil
}

func (c *rowCounter) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := c.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countedTx{Tx: tx, n: &c.rows}, nil
}

func (c *rowCounter) BeginRead(ctx context.Context) (engine.Tx, error) {
	tx, err := c.DB.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	return &countedTx{Tx: tx, n: &c.rows}, nil
}

type countedTx struct {
	engine.Tx
	n *atomic.Int64
}

func (t *countedTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	rs, err := t.Tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return &countedRows{Rows: rs, n: t.n}, nil
}

type countedRows struct {
	engine.Rows
	n *atomic.Int64
}

func (r *countedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n.Add(1)
	}
	return ok
}

// manyKeys inserts n empty rows named acct_0… in budgets (or semaphores),
// as n accounts that each drew on a per-account limit once would leave.
func manyKeys(t *testing.T, s *engine.Store, scope string, n int, insert func(keys []string) (string, []any)) []string {
	t.Helper()
	var all []string
	for i := 0; i < n; i++ {
		all = append(all, fmt.Sprintf("%s/acct_%06d", scope, i))
	}
	for i := 0; i < n; i += 500 {
		q, args := insert(all[i:min(i+500, n)])
		_, err := s.DB().Exec(context.Background(), q, args...)
		require.NoError(t, err)
	}
	return all
}

const manyAccounts = 3000

// One budget's page reads every budget (Store.ListBudgets, with a
// correlated count of waiting jobs per budget) and then keeps the one it
// shows: with a budget per account, each view of one budget, and each of
// its live refreshes (every 5 s while the tab is open), reads them all.
func TestReviewResourcesABudgetsPageReadsOnlyThatBudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		keys := manyKeys(t, s, "throttled", manyAccounts, s.SQL().InsertBudgets)
		counter := &rowCounter{DB: s.DB()}
		f.store = engine.New(s.Dialect(), counter)
		c := serve(t, f, "", ui.Options{})
		counter.rows.Store(0)
		code, body := c.get("/budget?key=" + keys[manyAccounts/2])
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, keys[manyAccounts/2])
		require.Less(t, counter.rows.Load(), int64(manyAccounts/10),
			"the page of one budget read %d rows with %d budgets stored", counter.rows.Load(), manyAccounts)
	})
}

// The Budgets and Concurrency pages list every budget and every
// concurrency key in one page, with no bound and no pages: with a
// per-account limit and many accounts, one view (and each live refresh)
// renders them all. docs/dashboard.md promises pages that read through
// indexes with counts that stop at a bound and say so, and the Jobs page
// pages by keyset; these two do neither.
func TestReviewResourcesTheBudgetAndConcurrencyPagesAreBounded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		manyKeys(t, s, "throttled", manyAccounts, s.SQL().InsertBudgets)
		manyKeys(t, s, "serial", manyAccounts, s.SQL().InsertSemaphores)
		c := serve(t, f, "", ui.Options{})
		for _, page := range []struct{ path, row string }{
			{"/budgets", "<tr data-key=\"throttled/acct_"},
			{"/concurrency", "<tr><td>serial/acct_"},
		} {
			code, body := c.get(page.path)
			require.Equal(t, http.StatusOK, code)
			rows := strings.Count(body, page.row)
			require.NotZero(t, rows, "%s lists no key", page.path)
			assert.LessOrEqual(t, rows, 1000, "%s rendered %d rows of %d keys in one page", page.path, rows, manyAccounts)
		}
	})
}
