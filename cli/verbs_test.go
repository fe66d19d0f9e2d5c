package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// budgets, queues and limits take their flags before their verb as well
// as after it: `budgets --json list` and `budgets --batch-size 5
// clear-idle` were refused ("budgets list takes no arguments, got
// "list""), the verb being read only from the first argument, and so were
// `queues --json pause mail` and `limits --to 5 --per 1s set TARGET`.
func TestVerbCommandsTakeFlagsBeforeOrAfterTheVerb(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		ok := func(want string, args ...string) {
			t.Helper()
			code, out, stderr := run(t, append(args, db)...)
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, out, stderr, want)
			}
		}
		isJSON := func(args ...string) {
			t.Helper()
			code, out, stderr := run(t, append(args, db)...)
			var v []map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want JSON", args, code, out, stderr)
			}
		}
		for _, args := range [][]string{
			{"budgets", "--json", "list"}, {"budgets", "list", "--json"}, {"budgets", "--json"},
			{"queues", "--json", "list"}, {"queues", "list", "--json"},
			{"limits", "--json", "list"}, {"limits", "list", "--json"},
		} {
			isJSON(args...)
		}
		ok("cleared 0 idle budgets", "budgets", "--batch-size", "5", "--pause", "0s", "clear-idle")
		ok("cleared 0 idle budgets", "budgets", "clear-idle", "--batch-size", "5")
		ok("queue mail is paused", "queues", "pause", "mail")
		ok("queue mail is resumed", "queues", "resume", "mail")
		ok("ping/x: 5 per 1s, burst 2", "limits", "--to", "5", "--per", "1s", "--burst", "2", "set", "ping/x")
		ok("ping/x: 6 per 1s, burst 1", "limits", "set", "--to", "6", "ping/x", "--per", "1s")
		ok("ping/x: the declared limit applies again", "limits", "clear", "ping/x")

		// --json goes with every verb: the ones that change something print
		// what they did as one JSON object, not their sentence.
		object := func(want map[string]any, args ...string) {
			t.Helper()
			code, out, stderr := run(t, append(args, db)...)
			var v map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want a JSON object", args, code, out, stderr)
				return
			}
			for k, w := range want {
				if v[k] != w {
					t.Errorf("%q: %s is %v in %s; want %v", args, k, v[k], out, w)
				}
			}
		}
		object(map[string]any{"name": "mail", "paused": true}, "queues", "--json", "pause", "mail")
		object(map[string]any{"name": "mail", "paused": false}, "queues", "resume", "--json", "mail")
		object(map[string]any{"target": "ping/x", "to": 5.0, "per": "1s", "burst": 2.0},
			"limits", "--json", "--to", "5", "--per", "1s", "--burst", "2", "set", "ping/x")
		object(map[string]any{"target": "ping/x", "cleared": true}, "limits", "--json", "clear", "ping/x")
		object(map[string]any{"cleared": 0.0}, "budgets", "clear-idle", "--json")

		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"budgets", "--json", "list", "extra"}, `budgets list takes no arguments, got "extra"`},
			{[]string{"budgets", "list", "--batch-size", "5"}, "--batch-size and --pause go with budgets clear-idle"},
			{[]string{"queues", "--json", "pause"}, "pause takes one queue name"},
			{[]string{"queues", "pause", "mail", "sms"}, `pause takes one queue name, got "mail sms"`},
			{[]string{"queues", "--json", "list", "mail"}, `queues list takes no arguments, got "mail"`},
		} {
			code, out, stderr := run(t, append(c.args, db)...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, stderr, c.want)
			}
		}
	})
}

// An unknown verb is bad usage naming the verbs, said before the database
// is opened (budgets and queues opened it first: here, a server that is
// not there, exit 1); `COMMAND help` prints the usage as -h does, with
// the verbs.
func TestVerbCommandsRefuseAnUnknownVerbBeforeOpening(t *testing.T) {
	const nowhere = "--database-url=postgres://nobody@127.0.0.1:1/x?connect_timeout=2"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"budgets", "frobnicate"}, `unknown budgets action "frobnicate": use list or clear-idle`},
		{[]string{"budgets", "--json", "frobnicate"}, `unknown budgets action "frobnicate": use list or clear-idle`},
		{[]string{"queues", "frobnicate", "mail"}, `unknown queues action "frobnicate": use list, pause or resume`},
		{[]string{"limits", "--json", "frobnicate"}, `unknown limits action "frobnicate": use list, set or clear`},
	} {
		code, out, stderr := run(t, append(c.args, nowhere)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
	for cmd, usage := range map[string]string{
		"budgets": "usage: myapp budgets [list [--limit N] [--after KEY] | clear-idle [--batch-size N] [--pause D]] [flags]",
		"queues":  "usage: myapp queues [list | pause QUEUE | resume QUEUE] [flags]",
		"limits":  "usage: myapp limits [list | set TARGET --to N --per D [--burst B] | clear TARGET] [flags]",
	} {
		for _, args := range [][]string{{cmd, "help"}, {cmd, "--help"}, {cmd, "list", "--help"}, {"help", cmd}} {
			code, out, stderr := run(t, append(args, nowhere)...)
			if code != 0 || !strings.Contains(stderr, usage) || !strings.Contains(stderr, "-database-url") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and the usage", args, code, out, stderr)
			}
		}
	}
}
