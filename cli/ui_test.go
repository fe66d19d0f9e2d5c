package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// syncBuffer is a buffer a running command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startUI runs `ui` until the test ends and returns the dashboard's URL.
func startUI(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	app := &cli.App{Name: "myapp", Stdout: &out, Stderr: &errOut}
	done := make(chan int, 1)
	go func() { done <- app.Run(ctx, append([]string{"ui"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, errOut.String())
		case <-time.After(10 * time.Second):
			t.Error("ui did not stop")
		}
	})
	re := regexp.MustCompile(`dashboard on (http://\S+/)`)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("ui exited with %d: %s", code, errOut.String())
		case <-time.After(10 * time.Millisecond): // polling the command's output, not waiting for a result
		}
	}
	t.Fatalf("ui did not start: %s", errOut.String())
	return ""
}

func TestUICommandListensOnLoopbackOrWithAuth(t *testing.T) {
	b := testdb.Backends(t)[0]
	url := b.URL(t)
	db := "--database-url=" + url
	code, _, _ := run(t, "migrate", "up", db)
	require.Equal(t, 0, code)

	code, _, stderr := run(t, "ui", "--addr", "0.0.0.0:0", db)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "is not a loopback address: give --basic-auth USER:PASS")
	code, _, _ = run(t, "ui", "--addr", ":0", db)
	require.Equal(t, 2, code, "an empty host listens everywhere")
	code, _, stderr = run(t, "ui", "--addr", "0.0.0.0:0", "--basic-auth", "nopassword", db)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "USER:PASS with both set")
	code, _, _ = run(t, "ui", "--addr", "nope", db)
	require.Equal(t, 2, code)

	plain := startUI(t, "--addr", "127.0.0.1:0", db)
	res, err := http.Get(plain)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	authed := startUI(t, "--addr", "0.0.0.0:0", "--basic-auth", "ops:s3cret", db)
	authed = strings.Replace(authed, "0.0.0.0", "127.0.0.1", 1)
	authed = strings.Replace(authed, "[::]", "127.0.0.1", 1)
	res, err = http.Get(authed)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	for _, bad := range [][2]string{{"ops", "wrong"}, {"", "s3cret"}, {"ops:s3cret", ""}} {
		req, _ := http.NewRequest("GET", authed, nil)
		req.SetBasicAuth(bad[0], bad[1])
		res, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, bad)
	}
	req, _ := http.NewRequest("GET", authed, nil)
	req.SetBasicAuth("ops", "s3cret")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	t.Setenv(cli.EnvUIBasicAuth, "ops:env")
	startUI(t, "--addr", "0.0.0.0:0", db)
	startUI(t, "--addr", "0.0.0.0:0", "--insecure-no-auth", "--read-only", db)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// uiToken reads the CSRF token a dashboard's limits page carries.
func uiToken(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "limits")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := csrfRE.FindSubmatch(body)
	require.NotNil(t, m, "no token on %slimits", base)
	return string(m[1])
}

// uiPause posts a pause of queue "default" to a dashboard with tok and
// returns the status.
func uiPause(t *testing.T, base, tok string) int {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.PostForm(base+"queues/pause", url.Values{"csrf": {tok}, "queue": {"default"}})
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// dashboard.md, "Running it alone": `ui` reads the dashboard's secret, in
// hex, from $SLUICE_UI_SECRET or from the file --secret-file names, so
// that replicas accept each other's forms. It had no way to take one:
// each process made its own, and a form another replica rendered was
// refused.
func TestUICommandTakesTheSecretFromTheEnvironmentOrAFile(t *testing.T) {
	b := testdb.Backends(t)[0]
	db := "--database-url=" + b.URL(t)
	code, _, _ := run(t, "migrate", "up", db)
	require.Equal(t, 0, code)
	secret := strings.Repeat("0123456789abcdef", 4)

	t.Setenv(cli.EnvUISecret, secret)
	one := startUI(t, "--addr", "127.0.0.1:0", db)
	two := startUI(t, "--addr", "127.0.0.1:0", db)
	tok := uiToken(t, one)
	require.Equal(t, tok, uiToken(t, two))
	require.Equal(t, http.StatusSeeOther, uiPause(t, two, tok), "a form from one replica posts to another")

	t.Setenv(cli.EnvUISecret, "") // blank: the file gives the secret
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte(strings.ToUpper(secret)+"\n"), 0o600))
	fromFile := startUI(t, "--addr", "127.0.0.1:0", "--secret-file", file, db)
	require.Equal(t, tok, uiToken(t, fromFile), "the same secret from a file (upper case, a newline after it)")

	unsetSecret(t)
	other := startUI(t, "--addr", "127.0.0.1:0", db)
	require.NotEqual(t, tok, uiToken(t, other), "without a secret, one of the process's own")
	require.Equal(t, http.StatusForbidden, uiPause(t, other, tok))
}

// A secret that is not hex, is short, is empty in its file, or is given
// twice is bad usage (exit 2) naming where it came from, before the
// database is opened; the error never shows the secret.
func TestUICommandRefusesABadSecret(t *testing.T) {
	db := "--database-url=sqlite:" + filepath.Join(t.TempDir(), "never-opened.db")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	good := strings.Repeat("ab", 32)
	for _, c := range []struct {
		env  string
		args []string
		want string
		hide string
	}{
		{env: "zz" + strings.Repeat("5e", 31) + "c0ffee", want: "$SLUICE_UI_SECRET is not hex: character 1 is not a hex digit", hide: "c0ffee"},
		{env: strings.Repeat("5e", 31) + "c0ffee=", want: "$SLUICE_UI_SECRET is not hex", hide: "c0ffee"},
		{env: "c0ffee" + strings.Repeat("5e", 30) + "a", want: "$SLUICE_UI_SECRET has an odd number of hex digits (67)", hide: "c0ffee"},
		{env: "c0ffee" + strings.Repeat("5e", 13), want: "$SLUICE_UI_SECRET is 16 bytes (32 hex digits); it must be at least 32 bytes (64 hex digits)", hide: "c0ffee"},
		{args: []string{"--secret-file", write("short", "c0ffee\n")}, want: "--secret-file " + filepath.Join(dir, "short") + " is 3 bytes", hide: "c0ffee"},
		{args: []string{"--secret-file", write("empty", "\n")}, want: "--secret-file " + filepath.Join(dir, "empty") + " is empty"},
		{args: []string{"--secret-file", filepath.Join(dir, "missing")}, want: "--secret-file: open " + filepath.Join(dir, "missing")},
		{env: good, args: []string{"--secret-file", write("good", good)}, want: "give the secret once: --secret-file or $SLUICE_UI_SECRET, not both", hide: good},
		{env: " ", want: "$SLUICE_UI_SECRET is set but empty: give the secret or unset the variable"},
	} {
		unsetSecret(t)
		if c.env != "" {
			t.Setenv(cli.EnvUISecret, c.env)
		}
		code, out, stderr := run(t, append(append([]string{"ui", "--addr", "127.0.0.1:0"}, c.args...), db)...)
		require.Equal(t, 2, code, "%v %q: %s", c.args, c.env, stderr)
		require.Contains(t, stderr, c.want)
		if c.hide != "" {
			require.NotContains(t, stderr+out, c.hide, "the secret is not shown")
		}
		require.NoFileExists(t, filepath.Join(filepath.Dir(strings.TrimPrefix(db, "--database-url=sqlite:")), "never-opened.db"))
	}
}

// unsetSecret unsets $SLUICE_UI_SECRET until the test ends.
func unsetSecret(t *testing.T) {
	t.Setenv(cli.EnvUISecret, "") // restored when the test ends
	require.NoError(t, os.Unsetenv(cli.EnvUISecret))
}
