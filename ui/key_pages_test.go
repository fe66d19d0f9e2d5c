package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ui"
)

// manyKeys inserts n empty rows named SCOPE/acct_… in budgets (or
// semaphores), as n accounts that each drew on a per-account limit once
// would leave, and returns their names.
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

// The Budgets and Concurrency pages, and so their live refreshes, which
// fetch the same URL, show a keyset page of keys at a time (?after=KEY,
// by key), with how many there are counted up to a bound: with a
// per-account limit and thousands of accounts, a view renders one page,
// and following "next" walks every key once, in order.
func TestTheBudgetsAndConcurrencyPagesShowAKeysetPageOfKeys(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		budgets := manyKeys(t, s, "throttled", manyAccounts, s.SQL().InsertBudgets)
		semaphores := manyKeys(t, s, "serial", manyAccounts, s.SQL().InsertSemaphores)
		c := serve(t, f, "", ui.Options{})
		nBudgets, err := s.CountBudgets(ctx, 10000)
		require.NoError(t, err)
		nSemaphores, err := s.CountSemaphores(ctx, 10000)
		require.NoError(t, err)
		next := regexp.MustCompile(`id="next" href="\./([^"]+)"`)
		for _, page := range []struct {
			path, row, count string
			keys             []string
		}{
			{"budgets", `<tr data-key="(throttled/acct_\d+)"`, fmt.Sprintf("%d budget(s).", nBudgets.N), budgets},
			{"concurrency", `<tr><td>(serial/acct_\d+)</td>`, fmt.Sprintf("%d concurrency key(s).", nSemaphores.N), semaphores},
		} {
			row := regexp.MustCompile(page.row)
			var seen []string
			path := page.path
			for pages := 0; path != ""; pages++ {
				require.Less(t, pages, manyAccounts/engine.DefaultPageSize+5, "%s: pages end", page.path)
				code, body := c.get("/" + path)
				require.Equal(t, http.StatusOK, code, path)
				require.Contains(t, body, page.count, "%s: every key, counted", path)
				keys := row.FindAllStringSubmatch(body, -1)
				require.LessOrEqual(t, len(keys), engine.DefaultPageSize, "%s: a page", path)
				for _, k := range keys {
					seen = append(seen, k[1])
				}
				path = ""
				if m := next.FindStringSubmatch(body); m != nil {
					path = strings.ReplaceAll(m[1], "&amp;", "&")
				}
			}
			require.Equal(t, page.keys, seen, "%s: every key once, by key", page.path)
		}

		code, body := c.get("/budgets?after=" + url.QueryEscape("throttled/acct_001000"))
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `<tr data-key="throttled/acct_001001"`)
		require.NotContains(t, body, `<tr data-key="throttled/acct_001000"`)
		require.Contains(t, body, `href="./budgets">« first</a>`)
		for _, bad := range []string{"/budgets?after=%00", "/concurrency?after=%ff"} {
			code, _ := c.get(bad)
			require.Equal(t, http.StatusBadRequest, code, "%s: no key is that", bad)
		}
	})
}
