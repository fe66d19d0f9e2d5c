package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// DESIGN.md, "Bad input gets a clear error, at the earliest point: …
// or the CLI", and one behaviour on every database. As the dashboard's
// job filter does (400), `sluice jobs --kind/--queue` refuses a kind or
// queue that no job can have, by the rule every stored key follows.
// Sent to the database, the three would answer three ways: MySQL, which
// ignores trailing spaces when it compares, would list queue "mail"'s jobs
// for --queue "mail " (a script's variable with a trailing space would
// list, and then retry or cancel, another queue's jobs); PostgreSQL fails
// with its own encoding error (SQLSTATE 22021, naming no flag) for bytes
// that are not UTF-8; SQLite lists nothing. It is a usage error (exit 2)
// naming the flag, before the database is asked, on every database.
func TestCLIJobsFiltersFollowTheKeyRule(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s, db := operatedStore(t, b)
			enqueuePings(t, s, "mail", "ping", 2)
			for _, f := range [][]string{{"--queue", "mail "}, {"--queue", "mail\xff"}, {"--kind", "ping "}, {"--kind", "ping\xff"}} {
				code, out, stderr := run(t, "jobs", f[0], f[1], db)
				require.Equal(t, 2, code, "%q: a value no job can have is bad usage\nstdout: %s\nstderr: %s", f, out, stderr)
				require.Contains(t, stderr, f[0], "%q: the error names the flag", f)
				require.NotContains(t, out, "mail", "%q lists no job", f)
			}
		})
	}
}

// The filters of `sluice jobs` are equalities, never LIKE patterns: "_" and "%" in a kind or queue match only themselves, on
// every database, and a quote or backslash is a character like another.
func TestCLIJobsFiltersWithLikeMetacharactersMatchExactly(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s, db := operatedStore(t, b)
			want := map[string]int64{}
			for _, q := range []string{"q_1", "qx1", "q%", "q%%", `q\_1`, `q'1`, "q🔑1"} {
				want[q] = enqueuePings(t, s, q, "k_"+q, 1)[0]
			}
			for q, id := range want {
				for _, f := range [][]string{{"--queue", q}, {"--kind", "k_" + q}} {
					code, out, stderr := run(t, "jobs", "--json", f[0], f[1], db)
					require.Equal(t, 0, code, stderr)
					var js []struct {
						ID    int64  `json:"id"`
						Queue string `json:"queue"`
					}
					require.NoError(t, json.Unmarshal([]byte(out), &js))
					require.Len(t, js, 1, "%q", f)
					require.Equal(t, id, js[0].ID, "%q", f)
					require.Equal(t, q, js[0].Queue)
				}
			}
		})
	}
}
