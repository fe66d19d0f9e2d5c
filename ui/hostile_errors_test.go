package ui_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

type loudArgs struct {
	Note string `json:"note"`
}

func (loudArgs) Kind() string { return "loud" }

// dashboard.md, "Safety" and "The pages": "Everything shown is escaped",
// and the job page shows "every failed attempt with its error". An error
// of over 16 KiB with a NUL, bytes that are not UTF-8 and markup on either
// side of the cut, and args with a NUL, U+2028 and markup, show as text on
// every database. (This promise held when a review wrote the test; it
// stays as a guard.)
func TestHugeHostileErrorsAndArgsRenderAsText(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		ctx := context.Background()
		head := "<script>alert(5)</script>\x00\xff\xfe</pre><img src=x onerror=alert(6)>"
		msg := head + strings.Repeat("é<b>", 5000) + "<script>alert(7)</script>"
		require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[loudArgs]) error {
			return errors.New(msg)
		}, jobs.MaxAttempts(2)))
		res, err := f.client.Enqueue(ctx, loudArgs{Note: "nul\x00 sep\u2028 </pre><script>alert(8)</script>"})
		require.NoError(t, err)
		for range 2 {
			w, err := jobs.NewWorker(testdb.Public(s), f.reg, jobs.WorkerConfig{Clock: f.clock, Logger: quiet(), Queues: []string{"default"}})
			require.NoError(t, err)
			_, err = w.Drain(ctx)
			require.NoError(t, err)
			f.clock.Advance(24 * 3600 * 1e9)
		}
		require.Equal(t, engine.StateFailed, job(t, f, res.ID).State)
		c := serve(t, f, "", ui.Options{})
		for _, p := range []string{"/jobs/" + strconv.FormatInt(res.ID, 10), "/jobs?kind=loud", "/jobs?state=failed"} {
			code, body := c.get(p)
			require.Equal(t, http.StatusOK, code, p)
			require.True(t, utf8.ValidString(body), p)
			noMarkup(t, p, body)
			require.NotContains(t, body, "<img src=x", p)
			require.NotContains(t, body, "\x00", p)
			require.NotContains(t, body, "<b>", p)
		}
		_, body := c.get("/jobs/" + strconv.FormatInt(res.ID, 10))
		require.Equal(t, 2, strings.Count(body, "<li value="), "both attempts are listed")
		require.GreaterOrEqual(t, strings.Count(body, "&lt;script&gt;alert(5)&lt;/script&gt;"), 2, "both attempts' errors are shown")
		require.Contains(t, body, "… (truncated)")
		require.Contains(t, body, "&lt;/pre&gt;&lt;script&gt;alert(8)")
	})
}
