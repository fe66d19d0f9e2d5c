package ratelimit

import (
	"slices"
	"time"
)

// BusiestWindow returns the most of times that fall in any half-open window
// [t, t+per): the number a limit of To per Per must keep at or below To.
// It is for checking a limit from the outside — admission times recorded
// by a test, a benchmark or a log — and does not change times. Times are
// compared by their wall clock, as the limit decided them, never by a
// monotonic reading some of them may carry: admissions decided exactly
// one Per apart would otherwise seem closer by the clock's drift.
func BusiestWindow(times []time.Time, per time.Duration) int {
	sorted := make([]time.Time, len(times))
	for i, t := range times {
		sorted[i] = t.Round(0) // the wall clock alone
	}
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range sorted {
		for sorted[i].Sub(sorted[j]) >= per {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
