package ui_test

import (
	"context"
	"github.com/sluicequeue/sluice/internal/engine"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

// screenshotDir holds the browser test's screenshots (git-ignored).
const screenshotDir = "screenshots"

// chromium finds Debian's chromium: the test skips without it, except
// under CI, where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (apt-get install -y chromium); CI runs the browser tests")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium)")
	return ""
}

// browser starts a headless chromium with a fresh profile for the test
// and returns a tab's context and the console errors seen so far.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String()+" at "+m.URL)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
		<-done
	})
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// shot saves a screenshot of the viewport.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

// do runs steps, each call given 20s.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sub, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sub, steps...); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.location.href + "\n" + document.body.innerText`))
		t.Fatalf("%v; the page: %s", err, body)
	}
}

// text reads the element's text in one evaluation: the live refresh
// replaces elements in place, so a node looked up by one call and read by
// the next may be gone by then ("No node with given id found").
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function(){var e=document.querySelector(`+strconv.Quote(sel)+
		`);if(!e){throw new Error("no element matches "+`+strconv.Quote(sel)+`);}return e.innerText;})()`))
	require.NoError(t, err, "reading the text of %s", sel)
	return s
}

// waitFor polls a JavaScript predicate until it holds, for up to 10s; a
// page that navigates meanwhile is polled again once it has loaded.
func waitFor(t *testing.T, ctx context.Context, predicate string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](predicate))
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(25 * time.Millisecond) // polling the DOM with a deadline
	}
	t.Fatalf("never: %s (last error: %v)", predicate, last)
}

// waitText waits (up to 10s) for the element to hold the text.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	waitFor(t, ctx, `(function(){var e=document.querySelector(`+strconv.Quote(sel)+`);return !!e && e.textContent.indexOf(`+strconv.Quote(want)+`)>=0;})()`)
}

func TestDashboardInABrowser(t *testing.T) {
	chromium(t)
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		f := newFixture(t, s)
		c := serve(t, f, "/ops/sluice", ui.Options{Refresh: 200 * time.Millisecond})
		root := c.srv.URL + "/ops/sluice/"
		ctx, consoleErrors := browser(t)
		name := func(page string) string { return page + "-" + s.Dialect().Name() }

		// Overview: every queue, and live figures without a reload.
		do(t, ctx, chromedp.Navigate(root), chromedp.WaitVisible(chromedp.CSS("table.queues")))
		require.Contains(t, text(t, ctx, "#queues"), `ev'il"q`)
		shot(t, ctx, name("overview"))
		_, err := f.client.Enqueue(context.Background(), flaky{N: 2}, jobs.Queue("arrived-live"))
		require.NoError(t, err)
		waitText(t, ctx, "#queues", "arrived-live")
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(t, err)
		require.Equal(t, root, loc, "the figures refreshed in place")

		// A hidden tab stops refreshing; shown again, it refreshes at once.
		refreshed := func() int {
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`parseInt(document.body.getAttribute("data-refreshed") || "0", 10)`))
			require.NoError(t, err)
			return n
		}
		visibility := func(hidden bool) {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`Object.defineProperty(document, "hidden", {configurable: true, get: function () { return `+
				strconv.FormatBool(hidden)+`; }}); document.dispatchEvent(new Event("visibilitychange")); true`))
			require.NoError(t, err)
		}
		visibility(true)
		time.Sleep(300 * time.Millisecond) // lets a refresh already under way land
		before := refreshed()
		time.Sleep(time.Second) // five refresh intervals: none may run while hidden
		require.Equal(t, before, refreshed(), "a hidden tab does not refresh")
		visibility(false)
		waitFor(t, ctx, `parseInt(document.body.getAttribute("data-refreshed") || "0", 10) > `+strconv.Itoa(before))

		// Jobs: filter by state through the form.
		do(t, ctx, chromedp.Navigate(root+"jobs"), chromedp.WaitVisible(chromedp.CSS("#filter")),
			chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "parked"),
			chromedp.Click(chromedp.CSS("#filter")))
		waitFor(t, ctx, `location.search.indexOf("state=parked") >= 0 && !!document.querySelector("#count")`)
		waitText(t, ctx, "#count", "job(s) match")
		rows := text(t, ctx, "table.jobs tbody")
		require.Contains(t, rows, "parked (rate limited: throttled/acme<script>alert(2)</script>)", "the key shows as text")
		require.NotContains(t, rows, "scheduled")
		shot(t, ctx, name("jobs"))

		// Open a rate-limited job: why it waits.
		do(t, ctx, chromedp.Click(chromedp.CSS(`a[href="./jobs/`+strconv.FormatInt(f.Parked, 10)+`"]`)),
			chromedp.WaitVisible(chromedp.CSS("ul.why")))
		why := text(t, ctx, "#why")
		require.Contains(t, why, "is parked on rate limit throttled/acme<script>alert(2)</script> (6 per 1m0s, burst 1")
		require.Contains(t, why, "estimated start: ")
		shot(t, ctx, name("job"))

		// Retry the failed job; it leaves the failed list.
		failed := strconv.FormatInt(f.Failed, 10)
		do(t, ctx, chromedp.Navigate(root+"jobs?state=failed"), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+failed+`"]`)),
			chromedp.Click(chromedp.CSS(`a[href="./jobs/`+failed+`"]`)), chromedp.WaitVisible(chromedp.CSS("#retry")))
		require.Contains(t, text(t, ctx, "#attempts"), `upstream said <script>alert("x")</script>`)
		require.Contains(t, text(t, ctx, "#attempts"), "Attempt 1 failed at")
		do(t, ctx, chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS(".flash")))
		require.Contains(t, text(t, ctx, ".flash"), "retry done")
		do(t, ctx, chromedp.Navigate(root+"jobs?state=failed"), chromedp.WaitVisible(chromedp.CSS("#count")))
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-id="`+failed+`"]').length`))
		require.NoError(t, err)
		require.Zero(t, n, "the retried job left the failed list")

		// Set an override from the limits page; the budget page changes.
		budget := root + "budget?key=" + url.QueryEscape("throttled/acme<script>alert(2)</script>")
		do(t, ctx, chromedp.Navigate(budget), chromedp.WaitVisible(chromedp.CSS("#limit")))
		require.Contains(t, text(t, ctx, "#limit"), "6 per 1m0s, burst 1")
		shot(t, ctx, name("budget"))
		do(t, ctx, chromedp.Navigate(root+"limits"), chromedp.WaitVisible(chromedp.CSS("#set-override")),
			chromedp.SendKeys(chromedp.CSS(`input[name="target"]`), "throttled"),
			chromedp.SendKeys(chromedp.CSS(`input[name="to"]`), "12"),
			chromedp.SendKeys(chromedp.CSS(`input[name="per"]`), "1m"),
			chromedp.SetValue(chromedp.CSS(`input[name="burst"]`), "2"),
			chromedp.Click(chromedp.CSS("#set")), chromedp.WaitVisible(chromedp.CSS(".flash")))
		require.Contains(t, text(t, ctx, "#overrides"), "throttled")
		shot(t, ctx, name("limits"))
		do(t, ctx, chromedp.Navigate(budget), chromedp.WaitVisible(chromedp.CSS("#limit")))
		require.Contains(t, text(t, ctx, "#limit"), "12 per 1m0s, burst 2")
		require.Contains(t, text(t, ctx, "#limit"), "overridden on throttled")

		for _, p := range []string{"budgets", "concurrency", "recurring"} {
			do(t, ctx, chromedp.Navigate(root+p), chromedp.WaitVisible(chromedp.CSS("main h1")))
			shot(t, ctx, name(p))
		}
		require.Empty(t, consoleErrors(), "the console stayed clean")
	})
}
