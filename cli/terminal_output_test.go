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

// enqueuePings enqueues n plain jobs of kind ping in queue and returns
// their ids.
func enqueuePings(t *testing.T, s *engine.Store, queue, kind string, n int) []int64 {
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

// The LAST ERROR column of `sluice jobs` is clipped to 60 characters,
// never to 60 bytes, which would cut a character of two or more bytes in
// half: an error (or cancel reason) in French, Greek, Japanese or with an
// emoji would print a stray byte that is not UTF-8 (a terminal shows
// U+FFFD, a script reading the output as UTF-8 fails). The CLI and the
// dashboard clip alike (human.Clip); the METADATA column is clipped the
// same way.
func TestCLIJobsClipsOnACharacterBoundary(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			ids := enqueuePings(t, s, "mail", "ping", 2)
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
// stay), and so is an operator's cancel reason. Printed raw to the
// operator's terminal, an upstream body echoed into an error
// ("\x1b]0;…\x07" sets the window title, "\x1b[2J" clears the screen,
// "\r" overwrites the line, OSC 52 writes to the clipboard in some
// terminals) would be executed by the terminal instead of shown, and the
// aligned table would break. `sluice jobs` (LAST ERROR) and `sluice
// explain` ("last error") show control characters escaped (\x1b, \r,
// \a), as text (human.Text); --json keeps the text exact.
func TestCLIShowsControlCharactersEscaped(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			ids := enqueuePings(t, s, "mail", "ping", 1)
			_, err := s.CancelJobs(ctx, engine.At(time.Now()), ids, "upstream said \x1b]0;owned\x07\x1b[2J\rall is well")
			require.NoError(t, err)
			for _, args := range [][]string{{"jobs"}, {"explain", fmt.Sprint(ids[0])}} {
				code, out, stderr := run(t, append(args, db)...)
				require.Equal(t, 0, code, stderr)
				require.Contains(t, out, "upstream said")
				requireNoControlBytes(t, args[0], out)
				require.Contains(t, out, `upstream said \x1b]0;owned\a\x1b[2J`, "%s shows them as text", args[0])
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

// A job may be scheduled up to the end of the year 9999 (jobs.RunAt,
// engine.MaxRunAt), and retries and snoozes are capped there. `sluice
// jobs` says when each job runs as a distance from now; computed as a
// time.Duration, which saturates at about 292 years, a job due in the year
// 9999 would be shown "in 106751d23h" (292 years), a false date with no
// sign that it was cut. Beyond a year the date is shown.
func TestCLIJobsShowsAFarRunTimeTruly(t *testing.T) {
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
			require.Contains(t, out, "on 9999-12-31")
		})
	}
}

// `sluice processes` shows a process's name, host and queues escaped: a
// worker names itself (WorkerConfig.Name, the hostname), and a name with
// control characters must not reach the terminal raw; --json keeps it
// exact.
func TestCLIProcessesShowsControlCharactersEscaped(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s, db := operatedStore(t, b)
			_, err := s.RegisterProcess(context.Background(), engine.Process{
				Kind: "worker", Name: "w\x1b]0;owned\x07", Hostname: "host\r\tx", PID: 7, Queues: "mail,\x1b[2J",
			}, engine.DatabaseTime(time.Now))
			require.NoError(t, err)
			code, out, stderr := run(t, "processes", db)
			require.Equal(t, 0, code, stderr)
			requireNoControlBytes(t, "processes", out)
			require.Contains(t, out, `w\x1b]0;owned\a`)
			require.Contains(t, out, `host\r\tx`)
			code, out, stderr = run(t, "processes", "--json", db)
			require.Equal(t, 0, code, stderr)
			var js []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &js))
			require.Equal(t, "w\x1b]0;owned\x07", js[0]["name"])
		})
	}
}

// The commands that take a queue or an override's target check it by
// the key rule before the database is opened: bad usage (exit 2) naming
// it, as `sluice jobs` does its filters.
func TestCLINamesFollowTheKeyRule(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"queues", "pause", "mail "}, "queue"},
			{[]string{"queues", "resume", "ma\x1bil"}, "queue"},
			{[]string{"limits", "clear", "Stripe "}, "target"},
			{[]string{"limits", "clear", "Str\xffipe"}, "target"},
			{[]string{"worker", "--queues", "mail,ma\x07il"}, "--queues"},
		} {
			code, out, stderr := run(t, append(c.args, db)...)
			require.Equal(t, 2, code, "%q: stdout %s stderr %s", c.args, out, stderr)
			require.Contains(t, stderr, c.want, "%q", c.args)
			requireNoControlBytes(t, c.args[0], stderr)
		}
	})
}

// requireNoControlBytes fails t if out holds a control byte other than a
// line feed.
func requireNoControlBytes(t *testing.T, what, out string) {
	t.Helper()
	for i, c := range []byte(out) {
		if c < 0x20 && c != '\n' || c == 0x7f {
			t.Fatalf("%s prints the control byte %#x raw at %d: %q", what, c, i, out)
		}
	}
}
