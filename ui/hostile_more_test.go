package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

type hostileConc struct {
	Key string `json:"key"`
}

func (hostileConc) Kind() string { return "hostile_conc" }

// Passes (a probe of dashboard.md "Everything shown is escaped"): the
// places the shared fixture leaves plain — a concurrency key, a
// process's name and host, a job's metadata and a cancel reason — carry
// markup and a NUL, and every page shows them as text.
func TestMoreHostileFieldsRenderAsText(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		ctx := context.Background()
		require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[hostileConc]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[hostileConc]{To: 1, Key: func(a hostileConc) any { return a.Key }})))
		key := `c<script>alert(11)</script>`
		meta := jobs.WithMetadata(map[string]string{"t<script>alert(12)</script>": `v</pre><img src=x onerror=alert(13)>`})
		first, err := f.client.Enqueue(ctx, hostileConc{Key: key}, meta)
		require.NoError(t, err)
		second, err := f.client.Enqueue(ctx, hostileConc{Key: key}, meta)
		require.NoError(t, err)
		_, err = s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: `w<script>alert(14)</script>`,
			Hostname: `h<img src=x onerror=alert(15)>`, PID: 1, Queues: "default"}, engine.At(f.clock.Now()))
		require.NoError(t, err)
		_, err = s.CancelJobs(ctx, engine.At(f.clock.Now()), []int64{second.ID}, "r<script>alert(16)</script>")
		require.NoError(t, err)
		c := serve(t, f, "", ui.Options{})
		for _, p := range []string{"/", "/concurrency", "/jobs", "/jobs/" + strconv.FormatInt(first.ID, 10),
			"/jobs/" + strconv.FormatInt(second.ID, 10), "/jobs?state=cancelled"} {
			code, body := c.get(p)
			require.Equal(t, http.StatusOK, code, p)
			noMarkup(t, p, body)
			for _, bad := range []string{"<script>alert(1", "<img src=x", "\x00"} {
				require.NotContains(t, body, bad, p)
			}
		}
	})
}

// Passes (a probe of dashboard.md "An action that is refused … quotes at
// most the start (40 bytes) of a bad value"): pausing a queue whose name
// is 16 KiB of markup is refused with a short message, and no queue is
// paused.
func TestPausingAHugeQueueNameIsRefusedShort(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		huge := strings.Repeat("<script>alert(9)</script>", 700)
		for _, a := range []string{"pause", "resume"} {
			code, loc, _ := c.post("/queues/"+a, url.Values{"csrf": {tok}, "queue": {huge}})
			require.Equal(t, http.StatusSeeOther, code, a)
			require.Less(t, len(loc), 1024, "%s: the refusal travels in a short URL", a)
			body := c.follow("/queues/"+a, loc)
			noMarkup(t, a, body)
		}
		qs, err := s.ListQueues(t.Context())
		require.NoError(t, err)
		for _, q := range qs {
			require.False(t, q.Paused && len(q.Name) > 255, "a 16 KiB queue name was paused")
		}
	})
}

// Passes (probe): query strings and ids a browser or a fuzzer may send —
// negative, garbage and huge `before`, an unknown state, a job id that
// is no number or does not exist, an action that does not exist — are
// answered 4xx, never 500, and never echo markup.
func TestGarbageParamsAreClientErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		for _, p := range []string{
			"/jobs?before=-1", "/jobs?before=abc", "/jobs?before=" + strings.Repeat("9", 400),
			"/jobs?state=%3Cscript%3Ealert(1)%3C/script%3E", "/jobs?state=RUNNING",
			"/jobs/abc", "/jobs/%3Cscript%3E", "/jobs/123456789", "/jobs/" + strings.Repeat("1", 5000),
		} {
			code, body := c.get(p)
			require.GreaterOrEqual(t, code, 400, p)
			require.Less(t, code, 500, p)
			noMarkup(t, p, body)
		}
		tok := c.token()
		code, _, _ := c.post("/jobs/"+strconv.FormatInt(f.Failed, 10)+"/explode", url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusNotFound, code)
		code, _, body := c.post("/jobs/bulk", url.Values{"csrf": {tok}, "action": {"retry"}, "kind": {strings.Repeat("<b>", 6000)}})
		require.Equal(t, http.StatusBadRequest, code)
		require.Less(t, len(body), 1024, "the refusal of a 16 KiB kind is short")
		// The body quotes the start of the kind as plain text (http.Error: text/plain, nosniff): not markup.
	})
}
