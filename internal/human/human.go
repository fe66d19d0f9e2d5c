// Package human prints times and durations for people: the CLI, Explain
// and the dashboard say "in 3s" and "2m0s ago" alike.
package human

import (
	"fmt"
	"strings"
	"time"
)

// In prints how far t is from now, rounded for people: "in 3s",
// "3m44s ago", or "now".
func In(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
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
func Duration(d time.Duration) string {
	if d < 0 {
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
