package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
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

// client is a browser-like client of a dashboard mounted at prefix: it
// does not follow redirects, so that tests see them.
type client struct {
	t      *testing.T
	srv    *httptest.Server
	prefix string
	http   *http.Client
}

func serve(t *testing.T, f *fixture, prefix string, opts ui.Options) *client {
	t.Helper()
	if opts.Now == nil {
		opts.Now = f.clock.Now
	}
	opts.Logger = quiet()
	h := ui.Handler(testdb.Public(f.store), f.reg, opts)
	mux := http.NewServeMux()
	if prefix == "" {
		mux.Handle("/", h)
	} else {
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &client{t: t, srv: srv, prefix: prefix, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	res, err := c.http.Get(c.srv.URL + c.prefix + path)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res.StatusCode, string(b)
}

func (c *client) post(path string, form url.Values, header ...string) (int, string, string) {
	c.t.Helper()
	req, err := http.NewRequest("POST", c.srv.URL+c.prefix+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Location"), string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) token() string {
	c.t.Helper()
	_, body := c.get("/limits")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(c.t, m, "no csrf token on the limits page")
	return m[1]
}

// follow reads the page a redirect points to (relative to the page that
// was posted to).
func (c *client) follow(from, loc string) string {
	c.t.Helper()
	base, err := url.Parse(c.srv.URL + c.prefix + from)
	require.NoError(c.t, err)
	u, err := base.Parse(loc)
	require.NoError(c.t, err)
	require.True(c.t, strings.HasPrefix(u.Path, c.prefix+"/"), "redirect %s leaves the mount path", u)
	_, body := c.get(strings.TrimPrefix(u.RequestURI(), c.prefix))
	return body
}

// noMarkup fails if any of the fixture's markup reached a page unescaped.
func noMarkup(t *testing.T, page, body string) {
	t.Helper()
	for _, bad := range []string{"<script>alert", "<img src=x", "</pre><script>"} {
		require.NotContains(t, body, bad, "%s renders markup from the data", page)
	}
}

func TestPagesRenderEscapedOnEveryDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "/admin/sluice", ui.Options{})
		pages := []string{"/", "/jobs", "/jobs?state=failed", "/jobs?kind=throttled", "/jobs?budget=" + url.QueryEscape("throttled/acme<script>alert(2)</script>"),
			"/jobs/" + strconv.FormatInt(f.Deferred, 10), "/jobs/" + strconv.FormatInt(f.Evil, 10), "/jobs/" + strconv.FormatInt(f.Failed, 10),
			"/jobs/" + strconv.FormatInt(f.Blocked, 10), "/budgets", "/budget?key=" + url.QueryEscape("throttled/acme<script>alert(2)</script>"),
			"/concurrency", "/recurring", "/limits"}
		for _, p := range pages {
			code, body := c.get(p)
			require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
			noMarkup(t, p, body)
			require.Contains(t, body, `href="`, p)
		}

		_, body := c.get("/")
		require.Contains(t, body, `ev&#39;il&#34;q`, "the queue name is escaped, not dropped")
		require.Contains(t, body, `href="./jobs"`, "links are relative to the mount path")

		_, body = c.get("/jobs/" + strconv.FormatInt(f.Evil, 10))
		require.Contains(t, body, `&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;`)
		require.Contains(t, body, `evil&lt;img src=x onerror=alert(1)&gt;`)
		require.Contains(t, body, `href="../jobs"`)

		// The job page says why it waits, in the words of Explain.
		e, err := f.client.Explain(context.Background(), f.Parked)
		require.NoError(t, err)
		_, body = c.get("/jobs/" + strconv.FormatInt(f.Parked, 10))
		require.Contains(t, body, "is parked on rate limit throttled/acme&lt;script&gt;")
		for _, l := range e.Lines()[1:] {
			if !strings.HasPrefix(l, "estimated start") && !strings.Contains(l, "next admission") {
				require.Contains(t, body, escape(l))
			}
		}
		require.Contains(t, body, "estimated start: ")

		_, body = c.get("/jobs/" + strconv.FormatInt(f.Failed, 10))
		require.Contains(t, body, "goroutine 1 [running]:", "the whole error, stack included")
		require.Contains(t, body, "Attempt 1 failed at", "each failed attempt is listed")

		_, body = c.get("/jobs/" + strconv.FormatInt(f.Blocked, 10))
		require.Contains(t, body, "blocked on concurrency key serial/a: 1 of 1 slot(s) held")

		_, body = c.get("/budgets")
		require.Contains(t, body, "6 per 1m0s, burst 1")
		require.Contains(t, body, "1 of 6", "one job was admitted in the last minute")
		_, body = c.get("/budget?key=" + url.QueryEscape("throttled/acme<script>alert(2)</script>"))
		require.Contains(t, body, "(peak 1)")
		require.Contains(t, body, "the limit's average, 0.1/s")

		code, _ := c.get("/jobs/99999999")
		require.Equal(t, http.StatusNotFound, code)
		code, body = c.get("/jobs/%3Cscript%3E")
		require.Equal(t, http.StatusNotFound, code)
		noMarkup(t, "bad id", body)
		code, body = c.get("/jobs?state=%3Cscript%3E")
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, "unknown job state &#34;&lt;script&gt;&#34;")
		code, _ = c.get("/jobs?before=-1")
		require.Equal(t, http.StatusBadRequest, code)

		// A message only shows when the dashboard signed it.
		_, body = c.get("/?error=" + url.QueryEscape("call +1 555") + "&sig=forged")
		require.NotContains(t, body, "call +1 555")
	})
}

func escape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")
	return r.Replace(s)
}

func TestActionsNeedTheTokenAndAreRefusedReadOnly(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "/admin", ui.Options{})
		retry := "/jobs/" + strconv.FormatInt(f.Failed, 10) + "/retry"

		code, _, _ := c.post(retry, url.Values{})
		require.Equal(t, http.StatusForbidden, code, "no token")
		code, _, _ = c.post(retry, url.Values{"csrf": {"forged"}})
		require.Equal(t, http.StatusForbidden, code, "a wrong token")
		tok := c.token()
		code, _, _ = c.post(retry, url.Values{"csrf": {tok}}, "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, code, "a cross-site post, even with the token")
		require.Equal(t, engine.StateFailed, job(t, f, f.Failed).State, "nothing was retried")

		code, loc, _ := c.post(retry, url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, engine.StateReady, job(t, f, f.Failed).State)
		require.Contains(t, c.follow(retry, loc), "retry done")

		// Cancelling a running or finished job is refused with the store's
		// reason, shown escaped.
		cancel := "/jobs/" + strconv.FormatInt(f.Failed, 10) + "/cancel"
		code, _, _ = c.post(cancel, url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusSeeOther, code)
		code, loc, _ = c.post(cancel, url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Contains(t, c.follow(cancel, loc), fmt.Sprintf("cannot cancel job %d: it is cancelled, and only ready, scheduled, parked, blocked or failed jobs can be cancelled", f.Failed))

		// Pause and resume a queue whose name holds quotes.
		code, loc, _ = c.post("/queues/pause", url.Values{"csrf": {tok}, "queue": {`ev'il"q`}})
		require.Equal(t, http.StatusSeeOther, code)
		body := c.follow("/queues/pause", loc)
		require.Regexp(t, `ev&#39;il&#34;q</a> <span class="badge paused">paused`, body)
		e, err := f.client.Explain(context.Background(), f.Evil)
		require.NoError(t, err)
		require.Equal(t, jobs.ReasonQueuePaused, e.Reason)
		code, _, _ = c.post("/queues/resume", url.Values{"csrf": {tok}, "queue": {`ev'il"q`}})
		require.Equal(t, http.StatusSeeOther, code)

		// Overrides: the store's checks, then the budget page changes.
		code, loc, _ = c.post("/limits/set", url.Values{"csrf": {tok}, "target": {"throttled"}, "to": {"3"}, "per": {"1m"}, "burst": {"5"}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Contains(t, c.follow("/limits/set", loc), "Burst is 5; it must be between 1 and To (3)")
		code, loc, _ = c.post("/limits/set", url.Values{"csrf": {tok}, "target": {"throttled"}, "to": {"<b>"}, "per": {"1m"}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Contains(t, c.follow("/limits/set", loc), "to: &#34;&lt;b&gt;&#34; is not a whole number")
		code, _, _ = c.post("/limits/set", url.Values{"csrf": {tok}, "target": {"throttled"}, "to": {"12"}, "per": {"1m"}, "burst": {"2"}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body = c.get("/budgets")
		require.Contains(t, body, "12 per 1m0s, burst 2 (1 every 5.454545455s), overridden on throttled")
		code, _, _ = c.post("/limits/clear", url.Values{"csrf": {tok}, "target": {"throttled"}})
		require.Equal(t, http.StatusSeeOther, code)
		_, body = c.get("/budgets")
		require.Contains(t, body, "6 per 1m0s, burst 1")

		// Read-only: no action is offered, and every one is refused.
		ro := serve(t, f, "", ui.Options{ReadOnly: true})
		for _, p := range []string{"/", "/jobs", "/jobs/" + strconv.FormatInt(f.Parked, 10), "/limits"} {
			_, body := ro.get(p)
			require.NotContains(t, body, `method="post"`, p)
			require.Contains(t, body, "read-only", p)
		}
		for _, p := range []string{"/jobs/" + strconv.FormatInt(f.Parked, 10) + "/cancel", "/jobs/bulk", "/queues/pause", "/limits/set", "/limits/clear"} {
			code, _, _ := ro.post(p, url.Values{"csrf": {tok}, "queue": {"default"}, "target": {"throttled"}, "action": {"cancel"}, "confirm": {"1"}})
			require.Equal(t, http.StatusForbidden, code, p)
		}
		require.Equal(t, engine.StateParked, job(t, f, f.Parked).State)
	})
}

func job(t *testing.T, f *fixture, id int64) *engine.JobInfo {
	t.Helper()
	j, err := f.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

func TestJobsPagesByKeysetAndBulkActionsConfirmTheCount(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{MaxBulk: 40})
		tok := c.token()

		// Over 50 parked jobs: pages of 50 by id, the next page starting below
		// the last id shown.
		ids := regexp.MustCompile(`<tr data-id="(\d+)">`)
		_, body := c.get("/jobs?state=parked")
		first := ids.FindAllStringSubmatch(body, -1)
		require.Len(t, first, 50)
		total, err := f.store.CountJobs(context.Background(), engine.JobPage{State: engine.StateParked}, 1000)
		require.NoError(t, err)
		require.Greater(t, total.N, int64(50))
		require.Contains(t, body, strconv.FormatInt(total.N, 10)+" job(s) match")
		next := regexp.MustCompile(`id="next" href="\./(jobs\?[^"]+)"`).FindStringSubmatch(body)
		require.NotNil(t, next)
		_, body = c.get("/" + strings.ReplaceAll(next[1], "&amp;", "&"))
		second := ids.FindAllStringSubmatch(body, -1)
		require.Len(t, second, int(total.N)-50)
		last, _ := strconv.Atoi(first[49][1])
		for _, m := range second {
			id, _ := strconv.Atoi(m[1])
			require.Less(t, id, last)
		}
		require.NotContains(t, body, `id="next"`)

		// Bulk cancel of the parked jobs: the confirmation states the
		// count (capped at MaxBulk), then the newest 40 are cancelled.
		code, _, body := c.post("/jobs/bulk", url.Values{"csrf": {tok}, "state": {"parked"}, "action": {"cancel"}})
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "Cancel the newest 40 of more than 40 job(s) matching")
		parked := func() int64 {
			n, err := f.store.CountJobs(context.Background(), engine.JobPage{State: engine.StateParked}, 1000)
			require.NoError(t, err)
			return n.N
		}
		require.EqualValues(t, total.N, parked(), "nothing moves before the confirmation")
		code, loc, _ := c.post("/jobs/bulk", url.Values{"csrf": {tok}, "state": {"parked"}, "action": {"cancel"}, "confirm": {"40"}})
		require.Equal(t, http.StatusSeeOther, code)
		require.Contains(t, c.follow("/jobs/bulk", loc), "cancel: 40 of 40 job(s) done")
		require.EqualValues(t, total.N-40, parked())

		code, _, _ = c.post("/jobs/bulk", url.Values{"csrf": {tok}, "state": {"parked"}, "action": {"<delete>"}})
		require.Equal(t, http.StatusBadRequest, code)
		code, _, _ = c.post("/jobs/bulk", url.Values{"csrf": {tok}, "state": {"nope"}, "action": {"retry"}})
		require.Equal(t, http.StatusBadRequest, code)
	})
}

// SQLite stores the bytes it is given; PostgreSQL and MySQL refuse text
// that is not UTF-8, so only SQLite can hold it.
func TestInvalidUTF8RendersAsText(t *testing.T) {
	b := testdb.Backends(t)[0]
	require.Equal(t, "sqlite", b.Name)
	s := b.Open(t)
	f := newFixture(t, s)
	_, err := s.DB().Exec(context.Background(), `UPDATE sluice_jobs SET last_error = ?, args = ? WHERE id = ?`,
		"bad \xff\xfe<script>alert(4)</script>", "{\"a\":\"\xc3\x28\"}", f.Failed)
	require.NoError(t, err)
	c := serve(t, f, "", ui.Options{})
	for _, p := range []string{"/jobs/" + strconv.FormatInt(f.Failed, 10), "/jobs?state=failed"} {
		code, body := c.get(p)
		require.Equal(t, http.StatusOK, code)
		require.True(t, utf8.ValidString(body), "%s is not valid UTF-8", p)
		require.Regexp(t, `bad \x{FFFD}+&lt;script&gt;alert\(4\)`, body, p)
		noMarkup(t, p, body)
	}
}
