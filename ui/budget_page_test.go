package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ui"
)

// One budget's page, and each of its live refreshes (every 5 s while the
// tab is open), reads that budget by its key and the admissions of that
// budget alone: with a budget per account, and jobs of other accounts
// claimed in the window, it reads neither the other budgets nor their
// admissions.
func TestOneBudgetsPageReadsOnlyThatBudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		keys := manyKeys(t, s, "throttled", manyAccounts, s.SQL().InsertBudgets)
		// 500 jobs of other accounts, running since a minute ago (process 1:
		// none runs, but nothing here looks).
		others := make([]engine.NewJob, 500)
		for i := range others {
			others[i] = engine.NewJob{Kind: "throttled", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1,
				RateKeys: []engine.RateKey{{Key: keys[i], Cost: 1}}}
		}
		res, err := s.Enqueue(ctx, nil, engine.At(f.clock.Now()), others)
		require.NoError(t, err)
		_, err = s.DB().Exec(ctx, fmt.Sprintf("UPDATE sluice_jobs SET state = 'running', process_id = 1, attempted_at = %d WHERE id >= %d",
			engine.Micros(f.clock.Now().Add(-60e9)), res[0].ID))
		require.NoError(t, err)

		counter := &rowCounter{DB: s.DB()}
		f.store = engine.New(s.Dialect(), counter)
		c := serve(t, f, "", ui.Options{})
		key := keys[manyAccounts/2]
		counter.rows.Store(0)
		code, body := c.get("/budget?key=" + url.QueryEscape(key))
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, key)
		require.Less(t, counter.rows.Load(), int64(100),
			"the page of one budget read %d rows with %d budgets stored and %d jobs of others claimed", counter.rows.Load(), manyAccounts, len(others))

		// The budget of one of those jobs shows its admission.
		_, body = c.get("/budget?key=" + url.QueryEscape(keys[7]))
		require.Contains(t, body, "(peak 1)")
	})
}
