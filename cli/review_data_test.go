package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// reviewDataJobs enqueues n plain jobs of kind ping in queue and returns
// their ids.
func reviewDataJobs(t *testing.T, s *engine.Store, queue, kind string, n int) []int64 {
	t.Helper()
	nj := make([]engine.NewJob, n)
	for i := range nj {
		nj[i] = engine.NewJob{Kind: kind, Queue: queue, Args: []byte(`{}`), MaxAttempts: 1}
	}
	got, err := s.Enqueue(context.Background(), nil, engine.At(time.Now()), nj)
	require.NoError(t, err)
	ids := make([]int64, n)
	for i, g := range got {
		ids[i] = g.ID
	}
	return ids
}

// The LAST ERROR column of `sluice jobs` is clipped to 60 bytes with
// s[:59]+"…", which cuts a character of two or more bytes in half: an
// error (or cancel reason) in French, Greek, Japanese or with an emoji
// prints a stray byte that is not UTF-8 (a terminal shows U+FFFD, a
// script reading the output as UTF-8 fails). The dashboard's clip counts
// runes; the CLI's must too. The METADATA column is clipped the same way.
func TestReviewDataCLIJobsClipsOnACharacterBoundary(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			ids := reviewDataJobs(t, s, "mail", "ping", 2)
			_, err := s.CancelJobs(ctx, engine.At(time.Now()), ids[:1], strings.Repeat("é", 40))
			require.NoError(t, err)
			_, err = s.CancelJobs(ctx, engine.At(time.Now()), ids[1:], strings.Repeat("🔑", 20))
			require.NoError(t, err)
			code, out, stderr := run(t, "jobs", db)
			require.Equal(t, 0, code, stderr)
			require.True(t, utf8.ValidString(out), "the table is valid UTF-8: %q", out)
			require.Contains(t, out, "éééé")
			require.Contains(t, out, "🔑🔑🔑🔑")
		})
	}
}

// A handler's error is kept with its control characters ("each byte that
// is not valid UTF-8, and each NUL, written as \xNN": ESC, BEL and CR
// stay), and so is an operator's cancel reason. `sluice jobs` and
// `sluice explain` print them raw to the operator's terminal: an upstream
// body echoed into an error ("\x1b]0;…\x07" sets the window title,
// "\x1b[2J" clears the screen, "\r" overwrites the line, OSC 52 writes to
// the clipboard in some terminals) is executed by the terminal instead of
// shown, and the aligned table breaks. The METADATA column already
// escapes them (strconv.Quote); LAST ERROR and explain's "last error"
// do not. Expected: control characters shown escaped (\x1b, \r, \a),
// as text, by every command that prints stored text to a terminal.
func TestReviewDataCLIShowsControlCharactersEscaped(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			ids := reviewDataJobs(t, s, "mail", "ping", 1)
			_, err := s.CancelJobs(ctx, engine.At(time.Now()), ids, "upstream said \x1b]0;owned\x07\x1b[2J\rall is well")
			require.NoError(t, err)
			for _, args := range [][]string{{"jobs"}, {"explain", fmt.Sprint(ids[0])}} {
				code, out, stderr := run(t, append(args, db)...)
				require.Equal(t, 0, code, stderr)
				require.Contains(t, out, "upstream said")
				for i, c := range []byte(out) {
					if c < 0x20 && c != '\n' || c == 0x7f {
						t.Errorf("%s prints the control byte %#x raw at %d: %q", args[0], c, i, out)
						break
					}
				}
			}
			// --json escapes them, as JSON does.
			code, out, stderr := run(t, "jobs", "--json", db)
			require.Equal(t, 0, code, stderr)
			var js []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &js))
			require.Equal(t, "upstream said \x1b]0;owned\x07\x1b[2J\rall is well", js[0]["last_error"])
		})
	}
}

// DESIGN.md, "Bad input gets a clear error, at the earliest point: …
// or the CLI", and one behaviour on every database. The dashboard's job
// filter refuses a kind, queue or budget key that no job can have (400,
// by the rule every stored key follows: dashboard.md); `sluice jobs
// --kind/--queue` sends any text to the database, and the three answer
// three ways: MySQL, which ignores trailing spaces when it compares,
// lists queue "mail"'s jobs for --queue "mail " (a script's variable
// with a trailing space lists, and then retries or cancels, another
// queue's jobs); PostgreSQL fails with its own encoding error
// (SQLSTATE 22021, naming no flag) for bytes that are not UTF-8; SQLite
// lists nothing. Expected: usage error (exit 2) naming the flag, before
// the database is asked, on every database.
func TestReviewDataCLIJobsFiltersFollowTheKeyRule(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s, db := operatedStore(t, b)
			reviewDataJobs(t, s, "mail", "ping", 2)
			for _, f := range [][]string{{"--queue", "mail "}, {"--queue", "mail\xff"}, {"--kind", "ping "}, {"--kind", "ping\xff"}} {
				code, out, stderr := run(t, "jobs", f[0], f[1], db)
				require.Equal(t, 2, code, "%q: a value no job can have is bad usage\nstdout: %s\nstderr: %s", f, out, stderr)
				require.Contains(t, stderr, f[0], "%q: the error names the flag", f)
				require.NotContains(t, out, "mail", "%q lists no job", f)
			}
		})
	}
}

// A job may be scheduled up to the end of the year 9999 (jobs.RunAt,
// engine.MaxRunAt), and retries and snoozes are capped there. `sluice
// jobs` says when each job runs as a distance from now, computed as a
// time.Duration, which saturates at about 292 years: a job due in the
// year 9999 is shown "in 106751d23h" (292 years), a false date with no
// sign that it was cut. Expected: the true distance, or the date.
func TestReviewDataCLIJobsShowsAFarRunTimeTruly(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			_, err := s.Enqueue(ctx, nil, engine.At(time.Now()), []engine.NewJob{
				{Kind: "ping", Queue: "mail", Args: []byte(`{}`), MaxAttempts: 1, RunAt: engine.MaxRunAt},
			})
			require.NoError(t, err)
			code, out, stderr := run(t, "jobs", db)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "scheduled")
			require.NotContains(t, out, "106751d", "the year 9999 is not 292 years away: %s", out)
		})
	}
}

// Passing probe: the filters of `sluice jobs` are equalities, never LIKE
// patterns: "_" and "%" in a kind or queue match only themselves, on
// every database, and a quote or backslash is a character like another.
func TestReviewDataCLIJobsFiltersWithLikeMetacharactersMatchExactly(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s, db := operatedStore(t, b)
			want := map[string]int64{}
			for _, q := range []string{"q_1", "qx1", "q%", "q%%", `q\_1`, `q'1`, "q🔑1"} {
				want[q] = reviewDataJobs(t, s, q, "k_"+q, 1)[0]
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
