// Package human prints times, durations and stored text for people: the
// CLI, Explain and the dashboard say "in 3s" and "2m0s ago" alike, and
// clip and escape text the same way.
package human

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// In prints how far t is from now, rounded for people: "in 3s",
// "3m44s ago", or "now". A time more than a year away either way is
// printed as its date in UTC, "on 2031-04-01": a distance in days would
// be hard to read, and one computed as a time.Duration is false beyond
// its 292 years (the year 9999, the latest run time a job may have,
// would be "in 106751d23h").
func In(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if t.After(now.AddDate(1, 0, 0)) || t.Before(now.AddDate(-1, 0, 0)) {
		return "on " + t.UTC().Format(time.DateOnly)
	}
	// Within a year either way t.Sub(now) does not saturate.
	d := t.Sub(now)
	switch {
	case d >= time.Millisecond:
		return "in " + Duration(d)
	case d <= -time.Millisecond:
		return Duration(-d) + " ago"
	}
	return "now"
}

// Duration rounds a duration for people: 840ms, 4.2s, 3m44s, 2h5m, 3d4h.
// The most negative duration, which has no negation, is printed as the
// one after it.
func Duration(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 {
			d++
		}
		return "-" + Duration(-d)
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		if r := d.Round(time.Second); r < time.Hour {
			return trimZeros(r.String())
		}
		return Duration(time.Hour)
	case d < 48*time.Hour:
		if r := d.Round(time.Minute); r < 48*time.Hour {
			return trimZeros(r.String())
		}
		return Duration(48 * time.Hour)
	}
	d = d.Round(time.Hour)
	out := fmt.Sprintf("%dd", d/(24*time.Hour))
	if h := (d % (24 * time.Hour)) / time.Hour; h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	return out
}

// trimZeros drops the zero seconds and minutes of a duration's text:
// "3m0s" is "3m", "2h0m0s" is "2h".
func trimZeros(s string) string {
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Stamp prints a time in UTC to the millisecond, or "-" for the zero
// time.
func Stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// Errors splits an error that joins several (errors.Join: an operator's
// action refused for some of its jobs), and the joins among them, into
// their parts, to print one to a line; any other error is its one part.
func Errors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Errors(e)...)
	}
	return out
}

// Text makes text that came from the database or the command line safe to
// print to a terminal: each control character (C0, including tab, line
// feed and carriage return; DEL; C1) is written as an escape, \t, \n, \r,
// \a, \x1b, \x7f or \u009b, and each byte that is not UTF-8 as \xNN, so
// that no stored text moves the cursor, sets the window title or breaks a
// table. Other text, non-ASCII included, is kept as it is; a backslash is
// not escaped. Text is idempotent: its result has nothing left to escape.
func Text(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if escaped(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !escaped(r, size):
			b.WriteString(s[i : i+size])
		case size == 1 && r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r >= 0x80:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			if e, ok := shortEscapes[byte(r)]; ok {
				b.WriteString(e)
			} else {
				fmt.Fprintf(&b, `\x%02x`, r)
			}
		}
		i += size
	}
	return b.String()
}

// shortEscapes are the escapes Go (and C) give the control characters
// that have a letter.
var shortEscapes = map[byte]string{
	'\a': `\a`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`,
}

// escaped reports whether Text escapes the rune r that is size bytes of
// its text: a C0 or C1 control character, DEL, or a byte that is not
// UTF-8.
func escaped(r rune, size int) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || r == utf8.RuneError && size == 1
}

// Clip puts s on one line (each run of white space one space) and cuts it
// to at most n characters (runes, never part of one), the last of them
// "…" when it was cut. n is at least 1.
func Clip(s string, n int) string {
	return cut(oneLine(s), n)
}

// Cell is Clip for a terminal: s on one line, its control characters
// escaped as Text does, cut to at most n characters. It cuts between
// escapes, never inside one: an escape that does not fit before the "…"
// is left out whole.
func Cell(s string, n int) string {
	s = oneLine(s)
	t := Text(s)
	if n = max(n, 1); utf8.RuneCountInString(t) <= n {
		return t
	}
	var b strings.Builder
	w := 0
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		e := Text(s[i : i+size])
		if w += utf8.RuneCountInString(e); w > n-1 {
			break
		}
		b.WriteString(e)
		i += size
	}
	return b.String() + "…"
}

// oneLine joins the words of s with one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cut cuts s to at most n runes, the last of them "…" when it was cut.
func cut(s string, n int) string {
	n = max(n, 1)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, k := 0, 0
	for k < n-1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		k++
	}
	return s[:i] + "…"
}
