package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/sluicequeue/sluice/store"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// charge is a kind in its own queue, as an app declares one.
type charge struct{ ID int }

func (charge) Kind() string { return "charge" }

// twoQueues is an app's registry: ping in "default", charge in "stripe".
func twoQueues(t *testing.T, handle func()) *jobs.Registry {
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[charge]) error {
		if handle != nil {
			handle()
		}
		return nil
	}, jobs.Queue("stripe")))
	return reg
}

// runApp runs one command line of app and returns its exit code, stdout
// and stderr.
func runApp(app *cli.App, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	app.Stdout, app.Stderr = &out, &errOut
	code := app.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// startApp runs a long-running command of app (worker, dispatcher) until
// the test ends, and returns a function that reads its stderr so far.
func startApp(t *testing.T, app *cli.App, args ...string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errOut := &watchWriter{seen: func() {}}
	app.Stdout, app.Stderr = io.Discard, errOut
	done := make(chan int, 1)
	go func() { done <- app.Run(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, errOut.String())
		case <-time.After(30 * time.Second):
			t.Errorf("%v did not stop", args)
		}
	})
	return errOut.String
}

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAWrongFlagPrintsOneUsageAndOneError(t *testing.T) {
	for _, cmd := range []string{"worker", "stats", "jobs", "migrate up", "queues pause", "dispatcher"} {
		args := append(strings.Fields(cmd), "--nope")
		code, _, stderr := run(t, args...)
		require.Equal(t, 2, code, cmd)
		require.Equal(t, 1, strings.Count(stderr, "flag provided but not defined: -nope"), "%s: %s", cmd, stderr)
		require.Equal(t, 1, strings.Count(stderr, "usage: myapp "), "%s: %s", cmd, stderr)
		require.True(t, strings.HasSuffix(stderr, "myapp "+args[0]+": flag provided but not defined: -nope\n"), "%s: the error is the last line: %s", cmd, stderr)
	}
}

func TestHelpOfEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"migrate", "--help"}, {"migrate", "-h"}, {"help", "migrate"}, {"migrate", "help"}} {
		code, out, stderr := run(t, args...)
		require.Equal(t, 0, code, "%v", args)
		require.Empty(t, out)
		require.Contains(t, stderr, "usage: myapp migrate up [--to VERSION] | down [N] | status | sql", "%v", args)
		require.Contains(t, stderr, "-database-url URL", "%v: migrate's help lists its flags like every command's", args)
	}
	code, _, stderr := run(t, "help", "jobs")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "usage: myapp jobs")
	require.Contains(t, stderr, "ready, scheduled, parked, blocked, running, completed, failed, cancelled")
	code, _, stderr = run(t, "jobs", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "blocked")
	for _, cmd := range []string{"worker", "dispatcher"} {
		code, _, stderr := run(t, cmd, "--help")
		require.Equal(t, 0, code)
		for _, flag := range []string{"-http-addr", "-metrics", "-log-format", "-horizon"} {
			require.Contains(t, stderr, flag, cmd)
		}
	}
}

func TestAnUnreachableDatabaseIsReportedOnce(t *testing.T) {
	code, _, stderr := run(t, "stats", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2")
	require.Equal(t, 1, code)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Equal(t, 1, strings.Count(stderr, "connection refused"), "the error once: %s", stderr)
}

// With no --database-url and no $SLUICE_DATABASE_URL, a command says it
// uses the default file, once; migrate always names its database.
func TestTheDefaultDatabaseIsNamed(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	dir := t.TempDir()
	t.Chdir(dir)
	abs, err := filepath.Abs("sluice.db")
	require.NoError(t, err)

	code, out, stderr := run(t, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(out, "database sqlite:sluice.db ("+abs+"), the default (no --database-url or $SLUICE_DATABASE_URL given)\napplied 001_core\n"), out)
	require.Empty(t, stderr, "migrate says it once, on stdout")

	code, _, stderr = run(t, "stats")
	require.Equal(t, 0, code)
	require.Equal(t, "myapp: no --database-url or $SLUICE_DATABASE_URL given: using the default database sqlite:sluice.db ("+abs+")\n", stderr)

	// A URL given by flag or environment is not announced, but migrate
	// still names it, password masked.
	code, _, stderr = run(t, "stats", "--database-url", "sqlite:"+filepath.Join(dir, "sluice.db"))
	require.Equal(t, 0, code)
	require.Empty(t, stderr)
	t.Setenv(cli.EnvDatabaseURL, "sqlite:"+filepath.Join(dir, "sluice.db"))
	code, _, stderr = run(t, "jobs")
	require.Equal(t, 0, code)
	require.Empty(t, stderr)
	code, out, _ = run(t, "migrate", "status", "--database-url", "mysql://app:Pw-not-shown@127.0.0.1:1/x")
	require.Equal(t, 1, code)
	require.Equal(t, "database mysql://app:xxxxx@127.0.0.1:1/x\n", out)
}

// Errors that suggest a command name the program that runs, not sluice.
func TestMessagesNameTheRunningProgram(t *testing.T) {
	db := "--database-url=" + unmigratedURL(t, testdb.Backends(t)[0])
	code, _, stderr := run(t, "jobs", db)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "run `myapp migrate up`")
	require.NotContains(t, stderr, "sluice migrate")
	code, _, stderr = runApp(&cli.App{Name: "sluice"}, "jobs", db)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "run `sluice migrate up`")
}

// A worker started through cli works the queues its registry's kinds
// declare unless told; told fewer, it names those it leaves.
func TestWorkerDefaultsToTheRegistrysQueues(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			_, db, s := migratedDB(t, b)
			var charged atomic.Int32
			app := &cli.App{Name: "myapp", Registry: twoQueues(t, func() { charged.Add(1) })}
			logs := startApp(t, app, "worker", db, "--poll-interval", "10ms")
			waitFor(t, "the worker to start", func() bool { return strings.Contains(logs(), "worker started") })
			require.Contains(t, logs(), `queues="[default stripe]"`)
			require.NotContains(t, logs(), "does not claim")

			c := jobs.NewClient(s, app.Registry, jobs.ClientConfig{})
			_, err := c.Enqueue(context.Background(), charge{ID: 1})
			require.NoError(t, err)
			waitFor(t, "the stripe job to run", func() bool { return charged.Load() == 1 })

			got := runUntilApp(t, &cli.App{Name: "myapp", Registry: twoQueues(t, nil)}, "worker started", "worker", db, "--queues", "default")
			require.Regexp(t, `level=WARN msg="sluice: this worker does not claim every queue the app's kinds declare; .*" not_claimed="stripe \(charge\)" queues=default`, got)
		})
	}
}

// migratedDB migrates a fresh database of b with `myapp migrate up` and
// returns its URL, the --database-url flag that names it, and a store on
// it, closed when the test ends.
func migratedDB(t *testing.T, b testdb.Backend) (url, flag string, s *store.Store) {
	t.Helper()
	url = b.URL(t)
	flag = "--database-url=" + url
	code, _, stderr := run(t, "migrate", "up", flag)
	require.Equal(t, 0, code, stderr)
	s, err := store.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return url, flag, s
}

// runUntilApp runs a long-running command of app until its stderr shows
// line, and returns its stderr.
func runUntilApp(t *testing.T, app *cli.App, line string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errOut := &watchWriter{line: line, seen: cancel}
	app.Stdout, app.Stderr = io.Discard, errOut
	require.Equal(t, 0, app.Run(ctx, args), errOut.String())
	return errOut.String()
}

// processes lists live workers and dispatchers; stats and check say when
// no dispatcher runs, and check names the queues no live worker claims.
func TestProcessesAndWhoServesWhat(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			_, db, s := migratedDB(t, b)
			release := make(chan struct{})
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(ctx context.Context, _ *jobs.Job[ping]) error {
				<-release
				return nil
			}))
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[charge]) error { return nil }, jobs.Queue("stripe")))
			app := &cli.App{Name: "myapp", Registry: reg}
			logs := startApp(t, app, "worker", db, "--queues", "default", "--poll-interval", "10ms")
			t.Cleanup(func() { close(release) })
			waitFor(t, "the worker to start", func() bool { return strings.Contains(logs(), "worker started") })

			_, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(ctx, ping{})
			require.NoError(t, err)
			waitFor(t, "the job to run", func() bool {
				st, err := engine.From(s).Stats(ctx)
				return err == nil && len(st) > 0 && st[0].Counts[engine.StateRunning] == 1
			})

			code, out, stderr := run(t, "processes", db)
			require.Equal(t, 0, code, stderr)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2, out)
			require.Regexp(t, `^ID\s+KIND\s+NAME\s+HOST\s+PID\s+QUEUES\s+STARTED\s+HEARTBEAT\s+RUNNING\s+STATE$`, lines[0])
			host, _ := os.Hostname()
			require.Regexp(t, `^\d+\s+worker\s+\S+\s+`+regexp.QuoteMeta(host)+`\s+`+itoa(os.Getpid())+`\s+default\s+(\d+ms|[\d.]+s) ago\s+(\d+ms|[\d.]+s) ago\s+1\s+live$`, lines[1])
			code, out, _ = run(t, "processes", "--json", db)
			require.Equal(t, 0, code)
			var ps []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &ps))
			require.Len(t, ps, 1)
			require.Equal(t, "worker", ps[0]["kind"])
			require.Equal(t, []any{"default"}, ps[0]["queues"])
			require.EqualValues(t, 1, ps[0]["jobs_running"])
			require.Equal(t, true, ps[0]["live"])
			for _, k := range []string{"id", "name", "host", "pid", "started_at", "heartbeat_at", "heartbeat_age_seconds"} {
				require.Contains(t, ps[0], k)
			}

			code, out, _ = runApp(app, "check", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "W007 warning: no live worker claims queue stripe, where kinds charge go")
			require.NotContains(t, out, "queue default,")
			require.Contains(t, out, "W008 warning: no dispatcher has heartbeated")
			code, out, _ = run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "1 live workers, 0 live dispatchers")
			require.Contains(t, out, "note: no dispatcher has heartbeated in the last 5m")

			d, err := dispatcher.New(s, dispatcher.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			dctx, stop := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() { defer close(stopped); _ = d.Run(dctx) }()
			defer func() { stop(); <-stopped }()
			waitFor(t, "the dispatcher to register", func() bool { return d.ProcessID() != 0 })
			code, out, _ = runApp(app, "check", db)
			require.Equal(t, 0, code)
			require.NotContains(t, out, "W008")
			code, out, _ = run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "1 live workers, 1 live dispatchers")
			require.NotContains(t, out, "note:")
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// --http-addr serves /healthz, /readyz and, with --metrics, /metrics.
func TestHealthEndpoints(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			_, db, s := migratedDB(t, b)
			get := func(u string) (int, string) {
				resp, err := http.Get(u)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(body)
			}
			addrOf := regexp.MustCompile(`msg="sluice: serving health checks" addr=(\S+)`)
			// ready waits for /readyz to answer 200: on a loaded machine a
			// heartbeat may come late, and the check says so until it comes.
			ready := func(base string) string {
				var body string
				waitFor(t, "/readyz to answer 200", func() bool {
					var code int
					code, body = get(base + "/readyz")
					return code == 200
				})
				return body
			}

			logs := startApp(t, &cli.App{Name: "myapp", Registry: twoQueues(t, nil)},
				"worker", db, "--http-addr", "127.0.0.1:0", "--metrics", "--heartbeat", "1s", "--dead-after", "3s")
			waitFor(t, "the worker to start", func() bool { return strings.Contains(logs(), "worker started") })
			base := "http://" + addrOf.FindStringSubmatch(logs())[1]
			code, body := get(base + "/healthz")
			require.Equal(t, 200, code)
			require.Equal(t, "ok\n", body)
			body = ready(base)
			require.JSONEq(t, `{"status":"ok","checks":[{"name":"database","ok":true},{"name":"schema","ok":true},{"name":"heartbeat","ok":true}]}`, body)
			code, body = get(base + "/metrics")
			require.Equal(t, 200, code)
			require.Contains(t, body, "sluice_jobs_claimed_total")
			require.Contains(t, body, "go_goroutines")

			// A schema behind what this binary needs is not ready.
			_, err := s.MigrateDown(context.Background(), 1)
			require.NoError(t, err)
			code, body = get(base + "/readyz")
			require.Equal(t, 503, code)
			require.Contains(t, body, `"status":"unavailable"`)
			require.Regexp(t, `\{"name":"schema","ok":false,"error":"pending migrations: \d+_\w+"\}`, body)
			_, err = s.MigrateUp(context.Background(), 0)
			require.NoError(t, err)
			ready(base)

			// The dispatcher serves them too; /metrics only when asked.
			logs = startApp(t, &cli.App{Name: "myapp", Registry: twoQueues(t, nil)},
				"dispatcher", db, "--http-addr", "127.0.0.1:0", "--heartbeat", "1s", "--dead-after", "3s")
			waitFor(t, "the dispatcher to start", func() bool { return strings.Contains(logs(), "dispatcher started") })
			base = "http://" + addrOf.FindStringSubmatch(logs())[1]
			ready(base)
			code, _ = get(base + "/metrics")
			require.Equal(t, 404, code)

			code, _, stderr := run(t, "worker", db, "--metrics")
			require.Equal(t, 2, code)
			require.Contains(t, stderr, "--metrics needs --http-addr")
			code, _, stderr = run(t, "worker", db, "--http-addr", "256.0.0.1:http")
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "myapp worker: --http-addr: ")
		})
	}
}

// An app keeps cli and still sets what flags cannot: the worker's
// middleware and hooks, the store's options, its own pool.
func TestAppConfiguresTheWorkerAndTheStore(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			_, db, s := migratedDB(t, b)
			var wrapped, finished, opened atomic.Int32
			app := &cli.App{
				Name:     "myapp",
				Registry: twoQueues(t, nil),
				Worker: jobs.WorkerConfig{
					Concurrency: 3,
					Middleware: []jobs.Middleware{func(ctx context.Context, run jobs.JobInfo, next func(context.Context) error) error {
						if run.Kind == "charge" && run.Attempt == 1 {
							wrapped.Add(1)
						}
						return next(ctx)
					}},
					Hooks: jobs.Hooks{OnFinish: func(jobs.FinishEvent) { finished.Add(1) }},
				},
				OpenStore: func(ctx context.Context, u string) (*store.Store, error) {
					opened.Add(1)
					return store.Open(ctx, u, store.DeleteOnComplete())
				},
			}
			code, _, stderr := runApp(app, "worker", "--help")
			require.Equal(t, 0, code)
			require.Regexp(t, `-concurrency N\n\s+N jobs run at once \(default 3\)`, stderr)

			logs := startApp(t, app, "worker", db, "--poll-interval", "10ms")
			waitFor(t, "the worker to start", func() bool { return strings.Contains(logs(), "worker started") })
			require.Contains(t, logs(), "concurrency=3")
			res, err := jobs.NewClient(s, app.Registry, jobs.ClientConfig{}).Enqueue(ctx, charge{ID: 9})
			require.NoError(t, err)
			waitFor(t, "the job to finish", func() bool { return finished.Load() == 1 })
			require.EqualValues(t, 1, wrapped.Load())
			require.EqualValues(t, 1, opened.Load())
			waitFor(t, "the completed job to be deleted", func() bool {
				_, err := engine.From(s).GetJob(ctx, res.ID)
				return err != nil
			})
		})
	}
}

// budgets shows a limit as declared, and durations for people; every
// --json is snake_case.
func TestBudgetsShowTheDeclaredLimit(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			_, db, s := migratedDB(t, b)
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil },
				jobs.RateLimit(ratelimit.Limit[ping]{To: 100, Per: time.Minute, Burst: 10, Key: "global"})))
			// 60 per 1m is also 1 per 1s: only the app knows which it declared.
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[charge]) error { return nil },
				jobs.RateLimit(ratelimit.Limit[charge]{To: 60, Per: time.Minute, Key: "global"})))
			c := jobs.NewClient(s, reg, jobs.ClientConfig{})
			_, err := c.EnqueueMany(ctx, []jobs.Item{{Args: ping{1}}, {Args: charge{1}}})
			require.NoError(t, err)
			w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Queues: []string{"default"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			_, err = w.Drain(ctx)
			require.NoError(t, err)

			app := &cli.App{Name: "myapp", Registry: reg}
			code, out, stderr := runApp(app, "budgets", db)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, `\ncharge/global\s+60 per 1m, burst 1\s+0\s+0\s+in (\d+ms|1s)\n`, out)
			require.Regexp(t, `\nping/global\s+100 per 1m, burst 10\s+0\s+0\s+now`, out)
			// The sluice binary knows no declarations: it says the same
			// limit in whole numbers.
			code, out, _ = runApp(&cli.App{Name: "sluice"}, "budgets", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `\ncharge/global\s+1 per 1s, burst 1\s`, out)
			require.Regexp(t, `\nping/global\s+100 per 1m, burst 10\s`, out)

			code, out, _ = runApp(app, "budgets", "--json", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, `"limit": "100 per 1m, burst 10"`)
			require.NoError(t, s.SetOverride(ctx, store.Override{Target: "ping/global", To: 5, Per: time.Second, Burst: 2}))

			snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
			for _, cmd := range [][]string{{"stats"}, {"jobs"}, {"queues"}, {"budgets"}, {"semaphores"}, {"recurring"}, {"limits"}, {"processes"}} {
				code, out, stderr := runApp(app, append(cmd, "--json", db)...)
				require.Equal(t, 0, code, "%v: %s", cmd, stderr)
				var v any
				require.NoError(t, json.Unmarshal([]byte(out), &v), "%v", cmd)
				require.NotEqual(t, "null\n", out, "%v: an empty list is []", cmd)
				walkKeys(v, func(k string) { require.Regexp(t, snake, k, "%v: key %q", cmd, k) })
			}
		})
	}
}

// walkKeys calls fn with every object key in v (but those of queues and
// args, which are names and data).
func walkKeys(v any, fn func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			fn(k)
			if k != "queues" && k != "args" {
				walkKeys(e, fn)
			}
		}
	case []any:
		for _, e := range x {
			walkKeys(e, fn)
		}
	}
}

// The standalone binary lists a config's tasks whose kinds it does not
// know, and its dispatcher still refuses to run them.
func TestRecurringListsAConfigOfAppKinds(t *testing.T) {
	db := "--database-url=" + testdb.Backends(t)[0].URL(t)
	app := &cli.App{Name: "sluice"}
	code, _, stderr := runApp(app, "migrate", "up", db)
	require.Equal(t, 0, code, stderr)
	config := filepath.Join(t.TempDir(), "tasks.json")
	require.NoError(t, os.WriteFile(config, []byte(`{"tasks": [{"key": "nightly-report", "schedule": "0 3 * * *", "kind": "build_report", "args": {"period": "daily"}}]}`), 0o600))
	code, out, stderr := runApp(app, "recurring", db, "--config", config)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `\nnightly-report\s+0 3 \* \* \*\s+build_report \(not registered in sluice: run its dispatcher from the app\)\s+-\s+in `, out)
	code, out, _ = runApp(app, "recurring", "--json", db, "--config", config)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"kind_registered": false`)
	code, _, stderr = runApp(app, "dispatcher", db, "--config", config)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "kind build_report is not registered in this program")
}
