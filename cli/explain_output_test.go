package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// explainApp migrates a fresh database of backend b, enqueues three
// jobs of a kind limited to one an hour on budget key and drains them once (one runs,
// one waits at a slot, one parks), and returns the job ids and a function
// that runs the app's command line against that database.
func explainApp(t *testing.T, b testdb.Backend, key string) ([]int64, func(args ...string) (int, string, string)) {
	ctx := context.Background()
	url := b.URL(t)
	s, err := cli.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[limited]) error { return nil },
		jobs.RateLimit(ratelimit.Limit[limited]{To: 1, Per: time.Hour, Key: key})))
	c := jobs.NewClient(s, reg, jobs.ClientConfig{})
	var ids []int64
	for i := range 3 {
		res, err := c.Enqueue(ctx, limited{N: i})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Logger: quietLogger()})
	require.NoError(t, err)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	return ids, func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		app := &cli.App{Name: "myapp", Registry: reg, Stdout: &out, Stderr: &errOut}
		code := app.Run(ctx, append(args, "--database-url="+url))
		return code, out.String(), errOut.String()
	}
}

// operations.md, "The operator's commands": "Errors are one line on
// stderr". Every other command names itself once ("myapp retry: cannot
// retry job 99999: not found"); explain said "myapp explain: explain: job
// 99999: not found", its own name twice (the engine prefixed "explain: "
// to the not-found error the CLI prefixes with the command's name).
func TestExplainOfAMissingJobNamesTheCommandOnce(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			_, run := explainApp(t, b, "global")
			code, _, stderr := run("explain", "99999999")
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "not found")
			require.Equal(t, "myapp explain: job 99999999: not found\n", stderr, "the command's name once, as the other commands say it")
		})
	}
}

// operations.md, "JSON": "Keys are snake_case". rate-limits.md: "`--json`
// prints the `jobs.Explanation` fields". Every key of `explain --json` is
// snake_case; those of "ahead" were {"N": 1, "Capped": false} (its
// type, jobs.Count, had no JSON tags).
func TestExplainJSONKeysAreSnakeCase(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ids, run := explainApp(t, b, "global")
			code, out, stderr := run("explain", "--json", strconv.FormatInt(ids[2], 10))
			require.Equal(t, 0, code, stderr)
			var doc map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			require.Equal(t, map[string]any{"n": 1.0, "capped": false}, doc["ahead"], "a parked job has one job ahead of it: %s", out)
			snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
			var walk func(path string, v any)
			walk = func(path string, v any) {
				switch v := v.(type) {
				case map[string]any:
					for k, sub := range v {
						require.Regexp(t, snake, k, "key %q of %s is not snake_case: %s", k, path, out)
						walk(path+"."+k, sub)
					}
				case []any:
					for i, sub := range v {
						walk(path+"["+strconv.Itoa(i)+"]", sub)
					}
				}
			}
			walk("$", doc)
		})
	}
}
