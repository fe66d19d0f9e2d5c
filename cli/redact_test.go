package cli

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

type noop struct{}

func (noop) Kind() string { return "noop" }

// secret is the password of every URL below: it must never be printed.
const secret = "Pw7-zQ-not-for-your-eyes"

// commandArgs are arguments that take a command past its first checks, so
// that it parses its flags and opens the database. Every command also runs
// bare.
var commandArgs = map[string][][]string{
	"migrate": {{"up"}, {"down"}, {"down", "2"}, {"status"}, {"sql", "--dialect", "postgres"}},
	"retry":   {{"1"}},
	"cancel":  {{"1"}},
	"queues":  {{"pause", "mail"}},
	"budgets": {{"clear-idle"}},
	"limits":  {{"set", "k/1", "--to", "5", "--per", "1s"}, {"clear", "k/1"}},
}

// TestNoCommandPrintsThePassword runs every command of the app's table
// with a database URL that holds a password, given by --database-url and
// by $SLUICE_DATABASE_URL, asking for help, with a flag typo, against
// servers that are not there and with URLs that do not parse, and checks
// that the password is in none of the output.
func TestNoCommandPrintsThePassword(t *testing.T) {
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
	app := &App{Name: "myapp", Registry: reg}
	cmds := app.commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for n := range commandArgs {
		require.Contains(t, cmds, n, "commandArgs names a command the app does not have")
	}

	urls := []string{
		"postgres://app:" + secret + "@127.0.0.1:1/db?connect_timeout=5", // nothing listens on port 1
		"mysql://app:" + secret + "@127.0.0.1:1/db",
		"mysql://app:" + secret + "@host:notaport/db",
		"postgres://app:" + secret + "@[::1/db",
		"postgres://app:" + secret + "@host:notaport/db",
		"mysql://app:" + secret + "@[::1/db",
		// Not a URL: refused before anything is opened or created.
		"host=127.0.0.1 port=1 user=app password=" + secret + " dbname=db",
	}
	run := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		app.Stdout, app.Stderr = &out, &out
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code := app.Run(ctx, args)
		require.NotContains(t, out.String(), secret, "%v", args)
		return code, out.String()
	}

	ran := map[string]bool{}
	for _, url := range urls {
		for _, byEnv := range []bool{false, true} {
			t.Setenv(EnvDatabaseURL, "")
			var db []string
			if byEnv {
				t.Setenv(EnvDatabaseURL, url)
			} else {
				db = []string{"--database-url=" + url}
			}
			for _, name := range names {
				for _, extra := range append([][]string{nil}, commandArgs[name]...) {
					args := append(append([]string{name}, extra...), db...)
					ran[name] = true
					code, out := run(t, append(args, "--help")...)
					require.Equal(t, 0, code, "%v --help: %s", args, out)
					code, out = run(t, append(args, "--nope")...)
					require.Equal(t, 2, code, "%v --nope: %s", args, out)
					run(t, args...)
				}
			}
		}
	}
	require.Len(t, ran, len(cmds), "every command ran")

	// The help shows $SLUICE_DATABASE_URL as the default, masked: the
	// operator still sees which database.
	t.Setenv(EnvDatabaseURL, urls[0])
	code, out := run(t, "stats", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "(default postgres://app:xxxxx@127.0.0.1:1/db?connect_timeout=5)")
	// So do the errors.
	code, out = run(t, "stats")
	require.Equal(t, 1, code)
	require.Contains(t, out, "myapp stats: postgres: connect to 127.0.0.1:1")
	code, out = run(t, "stats", "--database-url", urls[2])
	require.Equal(t, 1, code)
	require.Equal(t, "myapp stats: mysql: malformed URL: invalid port after host (in mysql://app:xxxxx@host:notaport/db)\n", out)
	code, out = run(t, "stats", "--database-url", urls[3])
	require.Equal(t, 1, code)
	require.Contains(t, out, "(in postgres://app:xxxxx@[::1/db)")

	// A URL before the command, or instead of it, is not echoed either.
	for _, args := range [][]string{{"--database-url=" + urls[0], "stats"}, {urls[1]}, {urls[3], "stats"}} {
		code, out := run(t, args...)
		require.Equal(t, 2, code, out)
		require.True(t, strings.HasPrefix(out, "myapp: "), out)
	}
}
