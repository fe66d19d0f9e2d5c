package cli_test

import (
	"bytes"
	"context"
	"net/http"
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
