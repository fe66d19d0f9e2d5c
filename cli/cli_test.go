package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store/dburl"
)

type ping struct{ N int }

func (ping) Kind() string { return "ping" }

// run runs one command line and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
	app := &cli.App{Name: "myapp", Registry: reg, Stdout: &out, Stderr: &errOut}
	code := app.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestOperatorCommandsEndToEnd(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := unmigratedURL(t, b)
			db := "--database-url=" + url

			code, _, stderr := run(t, "stats", db)
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "pending migrations")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

			code, out, _ := run(t, "migrate", "status", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `\n001\s+core\s+pending\n`, out)
			code, out, _ = run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "applied 001_core\napplied 002_rate_limits\napplied 003_concurrency\n")
			code, out, _ = run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			require.Equal(t, "database "+dburl.Redact(url)+"\nup to date\n", out, "migrate names its database")

			s, err := testdb.OpenURL(context.Background(), url)
			require.NoError(t, err)
			defer s.Close()
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Declare[ping](reg))
			c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
			ids, err := c.EnqueueMany(context.Background(), []jobs.Item{
				{Args: ping{1}, Options: []jobs.EnqueueOption{jobs.WithMetadata(map[string]string{"request_id": "r-1", "note": "tab\there"})}},
				{Args: ping{2}}, {Args: ping{3}, Options: []jobs.EnqueueOption{jobs.Queue("mail")}}})
			require.NoError(t, err)

			code, out, _ = run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Equal(t, "QUEUE    READY  SCHEDULED  PARKED  BLOCKED  RUNNING  COMPLETED  FAILED  CANCELLED\n"+
				"default  2      0          0       0        0        0          0       0\n"+
				"mail     1      0          0       0        0        0          0       0\n"+
				"\n0 live workers, 0 live dispatchers (see `myapp processes`)\n"+
				"note: no dispatcher has heartbeated in the last 5m: scheduled jobs (retries, jobs to run later, rate-limited jobs waiting for a slot) are not made ready; run `myapp dispatcher`\n", out)
			code, out, _ = run(t, "stats", "--json", db)
			require.Equal(t, 0, code)
			var st struct {
				Queues          map[string]map[string]int
				LiveDispatchers *int `json:"live_dispatchers"`
				Notes           []string
			}
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Equal(t, 2, st.Queues["default"]["ready"])
			require.Len(t, st.Queues["mail"], len(engine.States), "zero counts are included: %s", out)
			require.Contains(t, out, `"cancelled": 0`)
			require.Equal(t, 0, *st.LiveDispatchers)
			require.Len(t, st.Notes, 1)

			code, out, _ = run(t, "cancel", db, "--reason", "not needed", fmt.Sprint(ids[0].ID))
			require.Equal(t, 0, code)
			require.Equal(t, fmt.Sprintf("job %d is cancelled\n", ids[0].ID), out)
			code, out, _ = run(t, "jobs", db, "--state", "cancelled")
			require.Equal(t, 0, code)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2)
			require.Regexp(t, `^ID\s+KIND\s+QUEUE\s+STATE\s+ATTEMPT\s+RUN AT\s+DEFERRED\s+METADATA\s+LAST ERROR$`, lines[0])
			require.Regexp(t, fmt.Sprintf(`^%d\s+ping\s+default\s+cancelled\s+0/25\s+.*\s+0\s+note=tab\\there request_id=r-1\s+not needed$`, ids[0].ID), lines[1])
			code, out, _ = run(t, "jobs", db, "--state", "cancelled", "--json")
			require.Equal(t, 0, code)
			var listed []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &listed))
			require.Equal(t, map[string]any{"request_id": "r-1", "note": "tab\there"}, listed[0]["metadata"])

			code, out, stderr = run(t, "retry", db, fmt.Sprint(ids[0].ID))
			require.Equal(t, 0, code, stderr)
			require.Equal(t, fmt.Sprintf("job %d is ready\n", ids[0].ID), out)
			code, _, stderr = run(t, "retry", db, "999999")
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "job 999999: not found")

			code, out, _ = run(t, "queues", "pause", "mail", db)
			require.Equal(t, 0, code)
			require.Equal(t, "queue mail is paused\n", out)
			code, out, _ = run(t, "queues", db)
			require.Equal(t, 0, code)
			require.Equal(t, "QUEUE    STATE\ndefault  active\nmail     paused\n", out)

			code, out, _ = run(t, "budgets", db)
			require.Equal(t, 0, code)
			require.Equal(t, "BUDGET  LIMIT  WAITING  PARKED  NEXT ADMISSION\n", out)

			one := &engine.Conc{Key: "acct/7", To: 1, Duration: time.Minute}
			blocked, err := s.Enqueue(context.Background(), nil, engine.At(time.Now()), []engine.NewJob{
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
			})

			require.NoError(t, err)
			code, out, _ = run(t, "semaphores", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `^KEY\s+LIMIT\s+FREE\s+HOLDING\s+BLOCKED\s+EXPIRES\nacct/7\s+1\s+0\s+1\s+1\s+in (59|1m)\S*\n$`, out)
			code, out, _ = run(t, "jobs", db, "--state", "blocked")
			require.Equal(t, 0, code)
			require.Regexp(t, fmt.Sprintf(`\n%d\s+ping\s+default\s+blocked \(concurrency: acct/7\)`, blocked[1].ID), out)
		})
	}
}

func TestBadInputIsOneLineAndANonZeroExit(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"stats", "--database-url", "redis://localhost"}, 1, `unknown database URL scheme "redis"`},
		{[]string{"stats", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 1, "postgres: "},
		{[]string{"migrate"}, 2, "say up, down, status or sql"},
		{[]string{"migrate", "sql", "--dialect", "oracle"}, 2, `unknown dialect "oracle"`},
		{[]string{"jobs", "--state", "done"}, 2, `unknown job state "done"`},
		{[]string{"retry", "abc"}, 2, `"abc" is not a job id`},
		{[]string{"worker", "--concurrency", "0"}, 2, "--concurrency is 0; it must be from 1 to 10000"},
		{[]string{"worker", "--concurrency", "10001"}, 2, "--concurrency is 10001; it must be from 1 to 10000"},
		{[]string{"worker", "--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"migrate", "down", "abc"}, 2, `migrate down N: "abc" is not a number of migrations to revert`},
		{[]string{"migrate", "down", "0"}, 2, "migrate down N: N is 0; it must be at least 1"},
		{[]string{"migrate", "down", "1", "2"}, 2, `migrate down takes one number of migrations to revert, got "1 2"`},
		{[]string{"migrate", "down", "2", "--steps", "2"}, 2, "give the number of migrations once"},
		{[]string{"migrate", "down", "--steps", "0"}, 2, "--steps is 0; it must be at least 1"},
		{[]string{"migrate", "down", "--steps", "0x10"}, 2, `--steps "0x10" is not a number of migrations to revert`},
		{[]string{"migrate", "up", "--to", "seventeen"}, 2, `--to "seventeen" is not a migration's version`},
		{[]string{"migrate", "up", "--to", ""}, 2, `--to "" is not a migration's version`},
		{[]string{"migrate", "up", "3"}, 2, `migrate up takes no arguments, got "3"; to stop at a version, use --to VERSION`},
		{[]string{"migrate", "status", "all"}, 2, `migrate status takes no arguments, got "all"`},
		{[]string{"migrate", "sql", "postgres"}, 2, `migrate sql takes no arguments, got "postgres"`},
		{[]string{"migrate", "up", "--steps", "2"}, 2, "flag provided but not defined: -steps"},
		{[]string{"migrate", "down", "--to", "2"}, 2, "flag provided but not defined: -to"},
		{[]string{"limits", "list", "extra"}, 2, `limits list takes no arguments, got "extra"`},
		{[]string{"worker", "--heartbeat", "2m"}, 2, "--dead-after is 5m0s (the default); it must be at least 3 × --heartbeat (2m0s)"},
		{[]string{"worker", "--dead-after", "1m"}, 2, "--dead-after is 1m0s; it must be at least 3 × --heartbeat (1m0s)"},
		{[]string{"worker", "--dead-after", "-5m", "--heartbeat", "1s"}, 2, "--dead-after is -5m0s; it must be at least 3 × --heartbeat (1s)"},
		{[]string{"worker", "--heartbeat", "-1s"}, 2, "--heartbeat is -1s; it must be at least 1ms"},
		{[]string{"worker", "--heartbeat", "0"}, 2, "--heartbeat is 0s; it must be at least 1ms"},
		{[]string{"worker", "--poll-interval", "-1ms"}, 2, "--poll-interval is -1ms; it must be at least 1ms"},
		{[]string{"worker", "--shutdown-timeout", "-1s"}, 2, "--shutdown-timeout is -1s; it must be positive"},
		{[]string{"worker", "--give-back-for", "0"}, 2, "--give-back-for is 0s; it must be positive"},
		{[]string{"dispatcher", "--heartbeat", "10s", "--dead-after", "20s"}, 2, "--dead-after is 20s; it must be at least 3 × --heartbeat (10s)"},
		{[]string{"dispatcher", "--heartbeat", "1ns"}, 2, "--heartbeat is 1ns; it must be at least 1ms"},
		{[]string{"dispatcher", "--interval", "-1s"}, 2, "--interval is -1s; it must be at least 1ms"},
		// Refused before the database is opened (here one that cannot be).
		{[]string{"dispatcher", "--batch-size", "0", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 2, "--batch-size is 0; it must be from 1 to 10000"},
		{[]string{"dispatcher", "--batch-size", "10001", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 2, "--batch-size is 10001; it must be from 1 to 10000"},
		{[]string{"budgets", "clear-idle", "--batch-size", "40000", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 2, "--batch-size is 40000; it must be from 1 to 10000"},
	}
	for _, c := range cases {
		code, _, stderr := run(t, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, "%v", c.args)
		require.Contains(t, stderr, "myapp ", "%v", c.args)
	}
}

func TestMigrateSQLPrintsEachDialect(t *testing.T) {
	for _, d := range []string{"postgres", "mysql", "sqlite"} {
		code, out, _ := run(t, "migrate", "sql", "--dialect", d)
		require.Equal(t, 0, code)
		require.Contains(t, out, "CREATE TABLE IF NOT EXISTS sluice_migrations")
		require.Contains(t, out, "CREATE TABLE sluice_jobs")
		require.Contains(t, out, "INSERT INTO sluice_migrations (version, name, applied_at) VALUES (2, 'rate_limits', 0);")
	}
	code, out, _ := run(t, "migrate", "sql", "--dialect", "postgres", "--down")
	require.Equal(t, 0, code)
	require.Less(t, strings.Index(out, "002_rate_limits (down)"), strings.Index(out, "001_core (down)"))
}

func TestStatsShowBudgetsAndRecurringListsTasks(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			url := b.URL(t)
			db := "--database-url=" + url
			code, _, _ := run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			s, err := testdb.OpenURL(ctx, url)
			require.NoError(t, err)
			defer s.Close()
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil },
				jobs.RateLimit(ratelimit.Limit[ping]{To: 1, Per: time.Hour, Key: "global"})))
			c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
			_, err = c.EnqueueMany(ctx, []jobs.Item{{Args: ping{1}}, {Args: ping{2}}})
			require.NoError(t, err)
			w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			res, err := w.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Deferred)

			code, out, _ := run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `\n\nBUDGET\s+WAITING\s+NEXT ADMISSION\nping/global\s+1\s+in 1h\n\n`, out)
			code, out, _ = run(t, "stats", "--json", db)
			require.Equal(t, 0, code)
			var st struct {
				Budgets []struct {
					Key     string
					Waiting int
				}
			}
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Equal(t, "ping/global", st.Budgets[0].Key)
			require.Equal(t, 1, st.Budgets[0].Waiting)

			config := filepath.Join(t.TempDir(), "tasks.json")
			require.NoError(t, os.WriteFile(config, []byte(`{"tasks": [{"key": "nightly-ping", "schedule": "0 3 * * *", "kind": "ping", "args": {"N": 7}}],
  "maintenance": {"free_expired_slots": {"off": true}}}`), 0o600))
			code, out, stderr := run(t, "recurring", db, "--config", config)
			require.Equal(t, 0, code, stderr)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 5, out)
			require.Regexp(t, `^TASK\s+SCHEDULE\s+KIND\s+LAST RUN\s+NEXT RUN$`, lines[0])
			// Next 03:00, whatever the time of day the test runs at: up
			// to 24h away.
			require.Regexp(t, `^nightly-ping\s+0 3 \* \* \*\s+ping\s+-\s+in \d[\dhms]*$`, lines[1])
			require.Regexp(t, `^sluice\.clear_finished_jobs\s+@hourly\s+\(built in\)\s+-\s+in `, lines[2])
			require.Regexp(t, `^sluice\.clear_idle_budgets\s+@hourly\s+\(built in\)\s+-\s+in `, lines[3])
			require.Regexp(t, `^sluice\.free_expired_slots\s+@every 1s\s+\(built in\)\s+-\s+off$`, lines[4], "turned off, listed as off")

			// The sluice binary knows no kinds: it refuses the task, in one line.
			var errOut bytes.Buffer
			app := &cli.App{Name: "sluice", Stdout: io.Discard, Stderr: &errOut}
			require.Equal(t, 1, app.Run(ctx, []string{"dispatcher", db, "--config", config}))
			require.Contains(t, errOut.String(), "kind ping is not registered in this program; run the dispatcher from your app")
			require.Equal(t, 1, strings.Count(errOut.String(), "\n"))
		})
	}
}

func TestLimitsAndCheckCommands(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			db := "--database-url=" + unmigratedURL(t, b)
			code, out, _ := run(t, "check", db)
			require.Equal(t, 1, code)
			require.Contains(t, out, "E001 error: ")
			require.Contains(t, out, "1 errors, 0 warnings")

			code, _, _ = run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			code, out, _ = run(t, "check", db)
			require.Equal(t, 0, code)
			require.Equal(t, "W007 warning: no live worker claims queue default, where kinds ping go: their jobs wait until a worker claims it (worker --queues default)\n"+
				"W008 warning: no dispatcher has heartbeated in the last 5m0s: scheduled jobs (retries, jobs to run later, rate-limited jobs waiting for a slot) are not made ready; run one (dispatcher)\n"+
				"0 errors, 2 warnings\n", out)

			code, out, _ = run(t, "limits", "set", "ping/premium", "--to", "120", "--per", "1m", "--burst", "5", db)
			require.Equal(t, 0, code)
			require.Equal(t, "ping/premium: 120 per 1m0s, burst 5 (workers apply it within seconds)\n", out)
			code, out, _ = run(t, "limits", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `^TARGET\s+TO\s+PER\s+BURST\s+SET\nping/premium\s+120\s+1m0s\s+5\s+`, out)
			// Burst 0 means the default, 1: what is printed is what was stored.
			code, out, _ = run(t, "limits", "set", "ping/free", "--to", "10", "--per", "1s", "--burst", "0", db)
			require.Equal(t, 0, code)
			require.Equal(t, "ping/free: 10 per 1s, burst 1 (workers apply it within seconds)\n", out)
			code, out, _ = run(t, "limits", "--json", db)
			require.Equal(t, 0, code)
			var stored []struct {
				Target string
				Burst  int
			}
			require.NoError(t, json.Unmarshal([]byte(out), &stored))
			require.Equal(t, "ping/free", stored[0].Target)
			require.Equal(t, 1, stored[0].Burst)
			code, _, _ = run(t, "limits", "clear", "ping/free", db)
			require.Equal(t, 0, code)

			code, _, stderr := run(t, "limits", "set", "ping/x", "--to", "10", "--per", "1s", "--burst", "11", db)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, "--burst is 11; it may be at most --to (10)")

			// The app declares no limit on ping: the override is a stray.
			code, out, _ = run(t, "check", "--strict", db)
			require.Equal(t, 1, code)
			require.Contains(t, out, "W004 warning: the override of ping/premium names no declared limit")

			code, out, _ = run(t, "limits", "clear", "ping/premium", db)
			require.Equal(t, 0, code)
			require.Equal(t, "ping/premium: the declared limit applies again\n", out)
			code, _, stderr = run(t, "limits", "clear", "ping/premium", db)
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "no override is set")
		})
	}
}

// migrate down N reverts N migrations; a count that is not a number, or
// arguments up and status do not take, revert and apply nothing.
// afterDB is migrate's output after the line that names the database.
func afterDB(t *testing.T, out string) string {
	t.Helper()
	first, rest, _ := strings.Cut(out, "\n")
	require.True(t, strings.HasPrefix(first, "database "), "migrate names its database first: %q", out)
	return rest
}

func TestMigrateDownTakesACount(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			db := "--database-url=" + unmigratedURL(t, b)
			applied := func() []string {
				t.Helper()
				code, out, stderr := run(t, "migrate", "status", db)
				require.Equal(t, 0, code, stderr)
				var names []string
				for _, line := range strings.Split(strings.TrimSpace(afterDB(t, out)), "\n")[1:] {
					if f := strings.Fields(line); f[2] == "applied" {
						names = append(names, f[0]+"_"+f[1])
					}
				}
				return names
			}

			code, _, stderr := run(t, "migrate", "up", "2", db)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, `migrate up takes no arguments, got "2"`)
			require.Empty(t, applied(), "a refused up applies nothing")

			code, _, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			all := applied()
			require.GreaterOrEqual(t, len(all), 4)

			for _, args := range [][]string{{"abc"}, {"-1"}, {"0"}, {"1", "1"}, {"2.5"}} {
				code, out, stderr := run(t, append([]string{"migrate", "down", db}, args...)...)
				require.Equal(t, 2, code, "%v: %s", args, stderr)
				require.Empty(t, out, "%v", args)
				require.Equal(t, all, applied(), "migrate down %v reverts none", args)
			}

			code, out, stderr := run(t, "migrate", "down", "2", db)
			require.Equal(t, 0, code, stderr)
			n := len(all)
			require.Equal(t, fmt.Sprintf("reverted %s\nreverted %s\n", all[n-1], all[n-2]), afterDB(t, out))
			require.Equal(t, all[:n-2], applied())

			code, out, _ = run(t, "migrate", "down", db)
			require.Equal(t, 0, code)
			require.Equal(t, fmt.Sprintf("reverted %s\n", all[n-3]), afterDB(t, out))
			code, out, _ = run(t, "migrate", "down", "--steps", "1", db)
			require.Equal(t, 0, code)
			require.Equal(t, fmt.Sprintf("reverted %s\n", all[n-4]), afterDB(t, out))
			require.Equal(t, all[:n-4], applied())

			code, _, _ = run(t, "migrate", "status", "extra", db)
			require.Equal(t, 2, code)
			code, _, _ = run(t, "migrate", "down", "99", db)
			require.Equal(t, 2, code, "down N refuses more than are applied")
			require.Equal(t, all[:n-4], applied())
			code, out, _ = run(t, "migrate", "down", strconv.Itoa(n-4), db)
			require.Equal(t, 0, code)
			require.Equal(t, n-4, strings.Count(out, "reverted "))
			require.Empty(t, applied())
			code, out, _ = run(t, "migrate", "down", db)
			require.Equal(t, 0, code)
			require.Equal(t, "nothing to revert\n", afterDB(t, out))
		})
	}
}

// --heartbeat and --dead-after reach the worker and the dispatcher: each
// pair below passes only if both flags are applied (the other default
// would break the 3× rule), and the process starts.
func TestWorkerAndDispatcherTakeHeartbeatFlags(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			db := "--database-url=" + b.URL(t)
			code, _, stderr := run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			for _, c := range []struct{ cmd, started string }{
				{"worker", "sluice: worker started"},
				{"dispatcher", "sluice: dispatcher started"},
			} {
				for _, pair := range [][]string{{"--heartbeat", "2m", "--dead-after", "6m"}, {"--heartbeat", "10s", "--dead-after", "30s"}} {
					args := append([]string{c.cmd, db}, pair...)
					code, stderr := runUntil(t, c.started, args...)
					require.Equal(t, 0, code, "%v: %s", args, stderr)
					require.Contains(t, stderr, c.started)
				}
			}
			for _, cmd := range []string{"worker", "dispatcher"} {
				code, _, stderr := run(t, cmd, "--help")
				require.Equal(t, 0, code)
				require.Regexp(t, `-heartbeat duration\n\s+how often this process stamps its row .*\(default 1m0s\)`, stderr)
				require.Regexp(t, `-dead-after duration\n\s+how old a heartbeat must be .* at least 3 × --heartbeat.*\(default 5m0s\)`, stderr)
			}
		})
	}
}

// runUntil runs a long-running command and stops it (as SIGTERM would)
// once its stderr shows line; it returns the exit code and stderr.
func runUntil(t *testing.T, line string, args ...string) (int, string) {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errOut := &watchWriter{line: line, seen: cancel}
	app := &cli.App{Name: "myapp", Registry: reg, Stdout: io.Discard, Stderr: errOut}
	code := app.Run(ctx, args)
	return code, errOut.String()
}

// watchWriter collects what is written and calls seen once it holds line.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	line string
	seen func()
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.line) {
		w.seen()
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
