package human

import (
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// childEnv marks the child process of
// TestDurationOfTheMostNegativeDurationReturns.
const childEnv = "SLUICE_HUMAN_TEST_CHILD"

// Duration prints a negative duration as "-" and its negation, and
// math.MinInt64 is its own negation: printed naively it would recurse until
// the goroutine's stack overflowed, a fatal error no recover stops, and
// In(t, now) reaches it for a t more than 292 years before now (t.Sub(now)
// saturates). Run in a child process so that an overflow fails this test
// instead of the package's binary.
func TestDurationOfTheMostNegativeDurationReturns(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		t.Log(Duration(math.MinInt64))
		t.Log(In(time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Fatalf("the child process died (%v):\n%s", err, strings.Join(lines[:min(len(lines), 6)], "\n"))
	}
	if got, want := Duration(math.MinInt64), "-"+Duration(math.MaxInt64); got != want {
		t.Fatalf("Duration(math.MinInt64) = %q, want %q", got, want)
	}
}

// In says how far a time is; a time.Duration saturates at about 292
// years, and the end of the year 9999 (engine.MaxRunAt, the latest run
// time a job may have, where retries and snoozes are capped) must not be
// said to be "in 106751d23h".
func TestInATimeInTheYear9999IsNotSaidTo292Years(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got := In(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), now)
	if strings.Contains(got, "106751d") {
		t.Fatalf("In says %q: the year 9999 is not 292 years away", got)
	}
}

// Within a year In says the distance; beyond, the date.
func TestInSaysTheDateBeyondAYear(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now, "now"},
		{now.Add(3 * time.Second), "in 3s"},
		{now.Add(-3*time.Minute - 44*time.Second), "3m44s ago"},
		{now.AddDate(0, 0, 300), "in 300d"},
		{now.AddDate(1, 0, 0), "in 365d"},
		{now.AddDate(1, 0, 0).Add(time.Second), "on 2027-03-01"},
		{now.AddDate(-1, 0, 0).Add(-time.Second), "on 2025-03-01"},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), "on 9999-12-31"},
		{time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), "on 1700-01-01"},
		{time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -5*3600)), "on 10000-01-01"},
	} {
		if got := In(c.t, now); got != c.want {
			t.Errorf("In(%s) = %q, want %q", c.t, got, c.want)
		}
	}
}

// Text escapes control characters and bytes that are not UTF-8, and keeps
// all other text, non-ASCII included, as it is.
func TestTextEscapesControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "",
		"all is well":                 "all is well",
		"ééé 🔑 名前 \u00a0 \\x41":       "ééé 🔑 名前 \u00a0 \\x41",
		"\x1b]0;owned\x07\x1b[2J\rok": `\x1b]0;owned\a\x1b[2J\rok`,
		"a\tb\nc\x00d\x7fe":           `a\tb\nc\x00d\x7fe`,
		"csi \u009b2J nel \u0085":     `csi \u009b2J nel \u0085`,
		"bad \xff\xfe byte":           `bad \xff\xfe byte`,
		"cut \xe2\x82":                `cut \xe2\x82`,
	} {
		got := Text(in)
		if got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		if Text(got) != got {
			t.Errorf("Text(%q) is not idempotent: %q", got, Text(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("Text(%q) = %q is not UTF-8", in, got)
		}
	}
}

// Clip and Cell put text on one line and cut it on a character boundary;
// Cell escapes control characters too, before cutting, so that a cell is
// at most n characters wide, and cuts between escapes, never inside one.
func TestClipCutsOnACharacterBoundary(t *testing.T) {
	for _, c := range []struct {
		in         string
		n          int
		clip, cell string
	}{
		{"short", 10, "short", "short"},
		{"a  b\n\tc", 10, "a b c", "a b c"},
		{strings.Repeat("é", 40), 10, strings.Repeat("é", 9) + "…", strings.Repeat("é", 9) + "…"},
		{strings.Repeat("🔑", 20), 4, "🔑🔑🔑…", "🔑🔑🔑…"},
		{"exactly10!", 10, "exactly10!", "exactly10!"},
		{"x\x1by", 10, "x\x1by", `x\x1by`},
		{"\x1b\x1b\x1b", 5, "\x1b\x1b\x1b", `\x1b…`},
		{"\x1b\x1b\x1b", 4, "\x1b\x1b\x1b", `…`},
		{"ab\x1bcd", 5, "ab\x1bcd", `ab…`},
		{"ab\x1bcd", 7, "ab\x1bcd", `ab\x1b…`},
		{"é\u009bé", 4, "é\u009bé", `é…`},
		{"a\xffb", 3, "a\xffb", `a…`},
		{"abc", 0, "…", "…"},
	} {
		if got := Clip(c.in, c.n); got != c.clip {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.n, got, c.clip)
		}
		if got := Cell(c.in, c.n); got != c.cell {
			t.Errorf("Cell(%q, %d) = %q, want %q", c.in, c.n, got, c.cell)
		}
	}
}
