package ui_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ui"
)

var hrefRE = regexp.MustCompile(`href="([^"]*)"`)

// dashboard.md, "Mounting it in your app": "Every link and redirect is
// relative, so the dashboard works under any prefix." A job id holding an
// escaped slash (/jobs/1%2F2) is one path segment for the router and the
// browser, but was two for base(), which counted slashes in the unescaped
// path: every link of the page climbed one level above the mount path.
func TestLinksStayUnderTheMountPathForAnEscapedSlash(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "/admin/sluice", ui.Options{})
		for _, p := range []string{"/jobs/1%2F2", "/jobs/" + strconv.FormatInt(f.Failed, 10)} {
			_, body := c.get(p)
			page, err := url.Parse(c.srv.URL + c.prefix + p)
			require.NoError(t, err)
			for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
				u, err := page.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
				require.NoError(t, err)
				if u.Scheme == "data" {
					continue
				}
				require.True(t, strings.HasPrefix(u.Path, c.prefix+"/"), "%s: link %q goes to %s, outside the mount path", p, m[1], u.Path)
			}
		}
	})
}

// dashboard.md, "The pages": odd input in query strings is answered as bad
// input (4xx) or a page, never as a server failure: a huge or malformed
// id, and filters and budget keys no job can have. A NUL byte (valid
// UTF-8, which PostgreSQL refuses in text) in a kind, queue or budget
// filter, and a NUL or an invalid byte in a budget key, were 500s on
// PostgreSQL; they are 400s on every database.
func TestOddQueryStringsAreNotServerErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		var bad []string
		for _, p := range []string{
			"/jobs?before=9223372036854775807",
			"/jobs?before=9223372036854775808",
			"/jobs?before=0",
			"/jobs?before=1e3",
			"/jobs?state=",
			"/jobs?kind=" + strings.Repeat("k", 5000),
			"/jobs?kind=%ff",
			"/jobs/9223372036854775807",
			"/jobs/9223372036854775808",
			"/jobs/-1",
			"/jobs/0",
			"/budget?key=" + strings.Repeat("k", 5000),
			"/budget?key=nope",
			"/jobs?kind=a%00b",
			"/jobs?queue=a%00b",
			"/jobs?budget=a%00b",
			"/budget?key=a%00b",
			"/budget?key=%ff",
		} {
			code, body := c.get(p)
			if code >= 500 {
				bad = append(bad, p+" → "+strconv.Itoa(code))
			}
			noMarkup(t, p, body)
		}
		require.Empty(t, bad, "server errors for bad input")
		for _, p := range []string{"/jobs?kind=a%00b", "/jobs?queue=a%00b", "/jobs?budget=a%00b", "/jobs?kind=%ff",
			"/budget?key=a%00b", "/budget?key=%ff", "/budget?key=" + strings.Repeat("k", 5000)} {
			code, _ := c.get(p)
			require.Equal(t, http.StatusBadRequest, code, "%s: no job or budget has such a key", p)
		}
	})
}

// dashboard.md, "Safety": "Actions are POSTs with a CSRF token … a
// cross-origin POST is refused before the token is even checked", "GET
// requests never change anything", and responses carry the security
// headers. Every action, not only retry. (This promise held when a review
// wrote the test; it stays as a guard.)
func TestEveryActionNeedsTheTokenAndSameOrigin(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		parked := "/jobs/" + strconv.FormatInt(f.Parked, 10)
		actions := []struct {
			path string
			form url.Values
		}{
			{parked + "/cancel", url.Values{}},
			{parked + "/retry", url.Values{}},
			{"/jobs/bulk", url.Values{"state": {"parked"}, "action": {"cancel"}, "confirm": {"1"}}},
			{"/queues/pause", url.Values{"queue": {"default"}}},
			{"/limits/set", url.Values{"target": {"throttled"}, "to": {"1"}, "per": {"1h"}}},
		}
		for _, a := range actions {
			for _, h := range [][]string{
				nil,
				{"Origin", "https://evil.example"},
			} {
				form := url.Values{}
				for k, v := range a.form {
					form[k] = v
				}
				if h != nil {
					form.Set("csrf", tok)
				}
				code, _, _ := c.post(a.path, form, h...)
				require.Equal(t, http.StatusForbidden, code, "%s %v", a.path, h)
			}
			// A token in the query string instead of the body.
			code, _, _ := c.post(a.path+"?csrf="+url.QueryEscape(tok), a.form)
			require.Equal(t, http.StatusForbidden, code, "%s with the token in the query", a.path)
			// GET never acts.
			res, err := c.http.Get(c.srv.URL + a.path + "?csrf=" + url.QueryEscape(tok))
			require.NoError(t, err)
			res.Body.Close()
			require.NotEqual(t, http.StatusSeeOther, res.StatusCode, a.path)
			require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), a.path)
			require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'", a.path)
		}
		require.Equal(t, engine.StateParked, job(t, f, f.Parked).State)
		list, err := f.store.ListOverrides(t.Context())
		require.NoError(t, err)
		require.Empty(t, list)
		_, body := c.get("/")
		require.NotContains(t, body, "badge paused")
	})
}

// dashboard.md, "Safety": messages are signed "so a link from elsewhere
// cannot make a page show text of its choosing": a signature made for a
// flash does not vouch for the same text as an error, nor for another
// text. (This promise held when a review wrote the test; it stays as a
// guard.)
func TestSignedMessagesDoNotTransfer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		code, loc, _ := c.post("/jobs/"+strconv.FormatInt(f.Failed, 10)+"/retry", url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusSeeOther, code)
		u, err := url.Parse(loc)
		require.NoError(t, err)
		q := u.Query()
		msg, sig := q.Get("flash"), q.Get("sig")
		require.NotEmpty(t, msg)
		_, body := c.get("/?flash=" + url.QueryEscape(msg) + "&sig=" + url.QueryEscape(sig))
		require.Contains(t, body, escape(msg))
		_, body = c.get("/?error=" + url.QueryEscape(msg) + "&sig=" + url.QueryEscape(sig))
		require.NotContains(t, body, escape(msg), "a flash's signature does not sign an error")
		_, body = c.get("/?flash=" + url.QueryEscape(msg+" call +1 555") + "&sig=" + url.QueryEscape(sig))
		require.NotContains(t, body, "call +1 555")
	})
}
