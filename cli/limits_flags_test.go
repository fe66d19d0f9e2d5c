package cli_test

import (
	"strings"
	"testing"
)

// limits set's numbers are bad usage when wrong: exit 2, before the
// database is opened, naming the flag (a number too large for an int
// already failed the flag's parsing, as bad usage). `--burst -1`, a burst above --to, a
// pausing override's burst, --to or --per past what a limit may be and a
// --per finer than a microsecond were left to the store, whose refusal
// (naming the field, "Burst is -1", not the flag) exited 1; a pausing
// override's bad burst was even stored. Flags that only set takes are
// refused by list and clear.
func TestLimitsSetRefusesBadNumbersAsUsage(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		set := func(flags ...string) []string { return append([]string{"limits", "set", "Stripe/Account/7"}, flags...) }
		for _, c := range []struct {
			args []string
			want string
		}{
			{set("--to", "5", "--per", "1s", "--burst", "-1"), "--burst is -1; it must be at least 1"},
			{set("--to", "5", "--per", "1s", "--burst", "6"), "--burst is 6; it may be at most --to (5)"},
			{set("--to", "5", "--per", "1s", "--burst", "99999999999999999999"), `invalid value "99999999999999999999" for flag -burst`},
			{set("--to", "0", "--per", "1s", "--burst", "-1"), "--burst is -1"},
			{set("--to", "0", "--per", "1s", "--burst", "3000000000"), "--burst is 3000000000; it may be at most 2147483647"},
			{set("--to", "-1", "--per", "1s"), "--to is -1; it must be positive, or 0 to pause"},
			{set("--to", "3000000000", "--per", "1s"), "--to is 3000000000; it may be at most 2147483647"},
			{set("--to", "99999999999999999999", "--per", "1s"), `invalid value "99999999999999999999" for flag -to`},
			{set("--to", "5", "--per", "0"), "--per is 0s; it must be a positive duration"},
			{set("--to", "5", "--per", "-1s"), "--per is -1s; it must be a positive duration"},
			{set("--to", "5", "--per", "1000000h"), "--per is 1000000h0m0s; it may be at most"},
			{set("--to", "5", "--per", "1500ns"), "--per is 1.5µs; it must be a whole number of microseconds"},
			{set("--to", "5", "--per", "99999999999999999999s"), "for flag -per"},
			{set("--to", "5"), "set needs --to N (0 pauses) and --per D"},
			{set("--per", "1s"), "set needs --to N (0 pauses) and --per D"},
			{set("--to", "2000000", "--per", "1s"), "--to 2000000 --per 1s --burst 1: "},
			{[]string{"limits", "set", "mail ", "--to", "5", "--per", "1s"}, "target"},
			{[]string{"limits", "clear", "Stripe/Account/7", "--to", "5"}, "--to goes with limits set, not limits clear"},
			{[]string{"limits", "list", "--burst", "2"}, "--burst goes with limits set, not limits list"},
		} {
			// A flag that does not parse prints the usage first, as every
			// command does; the error is the last line.
			code, out, stderr := run(t, append(c.args, db)...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			if code != 2 || !strings.HasPrefix(last, "myapp limits: ") || !strings.Contains(last, c.want) {
				t.Errorf("%q: exit %d, stderr %q, stdout %q; want bad usage (2) naming %s", c.args, code, stderr, out, c.want)
			}
		}
		code, out, stderr := run(t, "limits", "--json", db)
		if code != 0 || strings.TrimSpace(out) != "[]" {
			t.Errorf("limits --json: exit %d, %q %q; want no override stored", code, out, stderr)
		}
		// What a limit may be is still accepted: a pause whatever its
		// burst, the largest --to and --per, a burst of 0 (1).
		for _, flags := range [][]string{
			{"--to", "0", "--per", "1s", "--burst", "7"},
			{"--to", "2147483647", "--per", "876000h"},
			{"--to", "5", "--per", "1500us", "--burst", "0"},
		} {
			code, out, stderr := run(t, append(set(flags...), db)...)
			if code != 0 {
				t.Errorf("%q: exit %d, %q %q; want it set", flags, code, out, stderr)
			}
		}
	})
}
