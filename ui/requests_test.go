package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
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

// dashboard.md, "The pages", Limits: clearing an override takes a target
// by the rule every stored name and key follows, as setting one does. The
// Clear form's target was sent to the database unchecked: on MySQL, whose
// comparisons ignore trailing spaces, clearing "throttled " cleared
// "throttled"'s override; on PostgreSQL a NUL byte or bytes that are not
// UTF-8 came back as the database's raw error; and a 16 KiB target was
// echoed whole into the redirect's URL. Each is refused, naming the
// target, and the override stays.
func TestClearingAnOverrideChecksTheTarget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		code, _, _ := c.post("/limits/set", url.Values{"csrf": {tok}, "target": {"throttled"}, "to": {"3"}, "per": {"1m"}})
		require.Equal(t, http.StatusSeeOther, code)
		for _, target := range []string{"throttled ", "throttled\x00", "\xff", "", strings.Repeat("t", 16<<10)} {
			code, loc, _ := c.post("/limits/clear", url.Values{"csrf": {tok}, "target": {target}})
			require.Equal(t, http.StatusSeeOther, code, "%.20q", target)
			list, err := f.store.ListOverrides(t.Context())
			require.NoError(t, err)
			require.Len(t, list, 1, "%.20q cleared an override", target)
			require.Less(t, len(loc), 1024, "%.20q: the message is short", target)
			body := c.follow("/limits/clear", loc)
			require.NotContains(t, body, "SQLSTATE", "%.20q", target)
			require.Regexp(t, `class="error"[^>]*>clear limit override: target &#34;`, body, "%.20q: the message names the target", target)
		}
	})
}

// dashboard.md, "The pages", Limits: a refused override says what is
// wrong. A value of 16 KiB in To, Per or Burst was quoted whole into the
// message and so into the redirect's URL (three times its size once
// escaped), past the 8 KiB a proxy in front commonly takes: the page the
// browser was sent to was refused. The message quotes the start of the
// value, and nothing is set.
func TestARefusedOverrideQuotesTheStartOfAHugeValue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		huge := strings.Repeat("9", 16<<10)
		for _, form := range []url.Values{
			{"target": {"throttled"}, "to": {huge}, "per": {"1m"}},
			{"target": {"throttled"}, "to": {"3"}, "per": {huge}},
			{"target": {"throttled"}, "to": {"3"}, "per": {"1m"}, "burst": {huge}},
			{"target": {huge}, "to": {"3"}, "per": {"1m"}},
		} {
			field := "target"
			for _, k := range []string{"to", "per", "burst"} {
				if form.Get(k) == huge {
					field = k
				}
			}
			form.Set("csrf", tok)
			code, loc, _ := c.post("/limits/set", form)
			require.Equal(t, http.StatusSeeOther, code, field)
			require.Less(t, len(loc), 1024, "%s: the message is short", field)
			body := c.follow("/limits/set", loc)
			require.Regexp(t, `class="error"[^>]*>[^<]*`+field+`[: ]`, body, "the message names %s", field)
			require.Contains(t, body, strings.Repeat("9", 40)+"&#34;...", "%s: the start of the value, quoted", field)
		}
		list, err := f.store.ListOverrides(t.Context())
		require.NoError(t, err)
		require.Empty(t, list)
	})
}

// dashboard.md, "The pages": a job that does not exist is a 404. Retrying
// or cancelling one (an id as large as an id can be) redirected to its
// page with the refusal as a message, and that page, a 404 itself, did
// not show it. The action answers 404 with the refusal; an id past the
// largest is a 400, as before; nothing changes.
func TestAnActionOnAJobThatDoesNotExistIsA404(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "", ui.Options{})
		tok := c.token()
		for _, a := range []string{"retry", "cancel"} {
			code, _, body := c.post("/jobs/9223372036854775807/"+a, url.Values{"csrf": {tok}})
			require.Equal(t, http.StatusNotFound, code, a)
			require.Contains(t, body, "cannot "+a+" job 9223372036854775807: not found")
			code, _, body = c.post("/jobs/9223372036854775808/"+a, url.Values{"csrf": {tok}})
			require.Equal(t, http.StatusBadRequest, code, a)
			require.Contains(t, body, "not a job id")
		}
		require.Equal(t, engine.StateFailed, job(t, f, f.Failed).State)
		require.Equal(t, engine.StateParked, job(t, f, f.Parked).State)
	})
}

// secret returns n bytes that stand for a secret shared by replicas.
func secret(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// dashboard.md, "Safety": replicas behind a load balancer share
// Options.Secret, so a page one of them rendered can post its actions to
// another, and the message a redirect carries verifies there. The secret
// was made at random by each handler and could not be passed in: every
// action posted to another replica (or after a restart) was refused.
// Handlers given different secrets, or none, still refuse each other's
// tokens and messages.
func TestReplicasGivenOneSecretAcceptEachOthersFormsAndMessages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		shared := secret(32, 1)
		a := serve(t, f, "", ui.Options{Secret: shared})
		b := serve(t, f, "/admin", ui.Options{Secret: slices.Clone(shared)})
		shared[0]++ // the handlers keep their own copy
		tok := a.token()
		require.Equal(t, tok, b.token(), "one secret, one token")

		retry := "/jobs/" + strconv.FormatInt(f.Failed, 10) + "/retry"
		code, loc, body := b.post(retry, url.Values{"csrf": {tok}})
		require.Equal(t, http.StatusSeeOther, code, body)
		require.Equal(t, engine.StateReady, job(t, f, f.Failed).State)
		// The message b signed shows on a's page.
		u, err := url.Parse(loc)
		require.NoError(t, err)
		_, page := a.get("/?" + u.RawQuery)
		require.Contains(t, page, `class="flash" role="status">job `+strconv.FormatInt(f.Failed, 10)+": retry done")

		// Another secret, or none: the token and the message are refused.
		cancel := "/jobs/" + strconv.FormatInt(f.Parked, 10) + "/cancel"
		for name, o := range map[string]ui.Options{"another secret": {Secret: secret(32, 2)}, "no secret": {}} {
			other := serve(t, f, "", o)
			code, _, body := other.post(cancel, url.Values{"csrf": {tok}})
			require.Equal(t, http.StatusForbidden, code, name)
			require.Contains(t, body, "missing or wrong CSRF token", name)
			_, page := other.get("/?" + u.RawQuery)
			require.NotContains(t, page, "retry done", name)
			code, _, _ = a.post(cancel, url.Values{"csrf": {other.token()}})
			require.Equal(t, http.StatusForbidden, code, name)
		}
		require.Equal(t, engine.StateParked, job(t, f, f.Parked).State, "nothing was cancelled")
	})
}

// dashboard.md, "Safety": a secret shorter than 32 bytes, or set but
// empty (an unset variable read into it), is refused when the handler is
// built: New returns the error, Handler panics with it. The error says
// how long it is, never what it holds. A nil store is refused too.
func TestAShortSecretIsRefusedWhenTheHandlerIsBuilt(t *testing.T) {
	s := testdb.Public(testdb.Backends(t)[0].Open(t))
	for _, n := range []int{0, 1, 31} {
		sec := secret(n, 'a')
		_, err := ui.New(s, nil, ui.Options{Secret: sec})
		require.Error(t, err, n)
		require.Contains(t, err.Error(), fmt.Sprintf("Options.Secret is %d bytes; it must be at least 32", n))
		if n > 4 {
			require.NotContains(t, err.Error(), string(sec[:4]), "the secret is not shown")
		}
		require.PanicsWithError(t, err.Error(), func() { ui.Handler(s, nil, ui.Options{Secret: sec}) })
	}
	for _, sec := range [][]byte{nil, secret(32, 'a'), secret(64, 'a')} {
		h, err := ui.New(s, nil, ui.Options{Secret: sec})
		require.NoError(t, err, len(sec))
		require.NotNil(t, h)
	}
	_, err := ui.New(nil, nil, ui.Options{})
	require.ErrorContains(t, err, "ui: the store is nil")
}
