// Package human prints times and durations for people: the CLI, Explain
// and the dashboard say "in 3s" and "2m0s ago" alike.
package human

import (
	"fmt"
	"time"
)

// In says how far t is from now: "in 3s", "2m0s ago", "now", or "-" for
// the zero time. Durations are rounded to the millisecond.
func In(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Millisecond)
	switch {
	case d > 0:
		return fmt.Sprintf("in %s", d)
	case d < 0:
		return fmt.Sprintf("%s ago", -d)
	}
	return "now"
}

// Stamp prints a time in UTC to the millisecond, or "-" for the zero
// time.
func Stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}
