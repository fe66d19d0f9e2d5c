package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
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
			url := b.URL(t)
			db := "--database-url=" + url

			code, _, stderr := run(t, "stats", db)
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "pending migrations")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

			code, out, _ := run(t, "migrate", "status", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "001      core         pending")
			code, out, _ = run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "applied 001_core\napplied 002_rate_limits\napplied 003_concurrency\n")
			code, out, _ = run(t, "migrate", "up", db)
			require.Equal(t, 0, code)
			require.Equal(t, "up to date\n", out)

			s, err := testdb.OpenURL(context.Background(), url)
			require.NoError(t, err)
			defer s.Close()
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Declare[ping](reg))
			c := jobs.NewClient(s, reg, jobs.ClientConfig{})
			ids, err := c.EnqueueMany(context.Background(), []jobs.Item{{Args: ping{1}}, {Args: ping{2}}, {Args: ping{3}, Options: []jobs.EnqueueOption{jobs.Queue("mail")}}})
			require.NoError(t, err)

			code, out, _ = run(t, "stats", db)
			require.Equal(t, 0, code)
			require.Equal(t, "QUEUE    READY  SCHEDULED  PARKED  BLOCKED  RUNNING  COMPLETED  FAILED  CANCELLED\n"+
				"default  2      0          0       0        0        0          0       0\n"+
				"mail     1      0          0       0        0        0          0       0\n", out)
			code, out, _ = run(t, "stats", "--json", db)
			require.Equal(t, 0, code)
			var st struct{ Queues map[string]map[string]int }
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Equal(t, 2, st.Queues["default"]["ready"])

			code, out, _ = run(t, "cancel", db, "--reason", "not needed", fmt.Sprint(ids[0].ID))
			require.Equal(t, 0, code)
			require.Equal(t, fmt.Sprintf("job %d is cancelled\n", ids[0].ID), out)
			code, out, _ = run(t, "jobs", db, "--state", "cancelled")
			require.Equal(t, 0, code)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2)
			require.Regexp(t, `^ID\s+KIND\s+QUEUE\s+STATE\s+ATTEMPT\s+RUN AT\s+LAST ERROR$`, lines[0])
			require.Regexp(t, fmt.Sprintf(`^%d\s+ping\s+default\s+cancelled\s+0/25\s+.*not needed$`, ids[0].ID), lines[1])

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

			one := &store.Conc{Key: "acct/7", To: 1, Duration: time.Minute}
			blocked, err := s.Enqueue(context.Background(), nil, time.Now(), []store.NewJob{
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
			})
			require.NoError(t, err)
			code, out, _ = run(t, "semaphores", db)
			require.Equal(t, 0, code)
			require.Regexp(t, `^KEY\s+LIMIT\s+FREE\s+HOLDING\s+BLOCKED\s+EXPIRES\nacct/7\s+1\s+0\s+1\s+1\s+in 59\.\d+s\n$`, out)
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
		{[]string{"worker", "--concurrency", "0"}, 2, "--concurrency is 0"},
		{[]string{"worker", "--nope"}, 2, "flag provided but not defined: -nope"},
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
