package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// budgets and semaphores list a page of keys at a time (--limit, 50 by
// default), by key, starting after --after, and say how to list the next
// page; stats shows the first page of budgets and says where the others
// are. A bad --limit or --after is bad usage, said before the database
// is opened.
func TestBudgetsAndSemaphoresListAPageOfKeysAtATime(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			var names []string
			for i := range 60 {
				names = append(names, fmt.Sprintf("acct/%02d", i))
			}
			for _, insert := range []func([]string) (string, []any){s.SQL().InsertBudgets, s.SQL().InsertSemaphores} {
				q, args := insert(names)
				_, err := s.DB().Exec(ctx, q, args...)
				require.NoError(t, err)
			}

			for _, cmd := range []string{"budgets", "semaphores"} {
				code, out, stderr := run(t, cmd, db, "--limit", "2")
				require.Equal(t, 0, code, stderr)
				lines := strings.Split(strings.TrimSpace(out), "\n")
				require.Len(t, lines, 5, out)
				require.Regexp(t, `^acct/00\s`, lines[1])
				require.Regexp(t, `^acct/01\s`, lines[2])
				require.Equal(t, "more after acct/01: myapp "+cmd+" --after acct/01", lines[4])

				code, out, _ = run(t, cmd, db, "--after", "acct/57", "--limit", "2")
				require.Equal(t, 0, code)
				lines = strings.Split(strings.TrimSpace(out), "\n")
				require.Len(t, lines, 3, "the last page, and no more: %s", out)
				require.Regexp(t, `^acct/58\s`, lines[1])
				require.Regexp(t, `^acct/59\s`, lines[2])

				code, out, _ = run(t, cmd, db)
				require.Equal(t, 0, code)
				require.Equal(t, 50, strings.Count(out, "\nacct/"), "50 by default")
				require.Contains(t, out, "more after acct/49: myapp "+cmd+" --after acct/49")

				// JSON keeps stdout for the page, and says on stderr that
				// the list goes on.
				code, out, stderr = run(t, cmd, db, "--json", "--limit", "3", "--after", "acct/10")
				require.Equal(t, 0, code)
				var listed []struct{ Key string }
				require.NoError(t, json.Unmarshal([]byte(out), &listed))
				require.Equal(t, []struct{ Key string }{{"acct/11"}, {"acct/12"}, {"acct/13"}}, listed)
				require.Equal(t, "more after acct/13: myapp "+cmd+" --after acct/13\n", stderr)
				code, out, stderr = run(t, cmd, db, "--json", "--after", "acct/57")
				require.Equal(t, 0, code)
				require.NoError(t, json.Unmarshal([]byte(out), &listed))
				require.Len(t, listed, 2)
				require.Empty(t, stderr, "the last page")

				for _, bad := range [][]string{{"--limit", "0"}, {"--limit", "10001"}, {"--limit", "9223372036854775807"}, {"--after", "a\x00b"}} {
					code, _, stderr := run(t, append([]string{cmd, "--database-url=postgres://nobody@127.0.0.1:1/x"}, bad...)...)
					require.Equal(t, 2, code, "%s %v: bad usage, before the database is opened: %s", cmd, bad, stderr)
					if bad[0] == "--limit" {
						require.Contains(t, stderr, "it must be from 1 to 10000")
					}
				}
			}
			code, _, stderr := run(t, "budgets", "clear-idle", "--limit", "3", db)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, "--limit and --after go with budgets list")

			code, out, _ := run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Equal(t, 50, strings.Count(out, "\nacct/"), "the first page of budgets")
			require.Contains(t, out, "note: the first 50 budgets are shown; more after acct/49: myapp budgets --after acct/49\n")
		})
	}
}
