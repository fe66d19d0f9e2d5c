package engine

import (
	"errors"
	"fmt"
	"time"
)

// MaxLimitedRunAt is the latest time a job that draws on a rate-limit
// budget may be scheduled for, and the latest a budget decides at:
// 2262-04-11T23:47:16Z. A budget keeps its times in nanoseconds since 1970
// (Nanos), which an int64 holds no further.
var MaxLimitedRunAt = lastNanos.Truncate(time.Second).UTC()

// ErrClockPastBudgets is returned by what decides rate-limit budgets (a
// claim of rate-limited jobs, the hand-out of slots to parked jobs, the
// clean-up of idle budgets) on a clock that reads after MaxLimitedRunAt:
// a budget decided there would hand out slots no later clock reaches, or
// none at all, and hold back for good. An upstream's RetryAfter is not
// refused there: its job waits as asked, and it holds back no budget.
var ErrClockPastBudgets = errors.New("the clock reads past the last time a rate-limit budget holds")

// budgetNow returns at as a budget's time (Nanos), or ErrClockPastBudgets,
// naming at, when it is after MaxLimitedRunAt.
func budgetNow(at time.Time) (int64, error) {
	if at.After(MaxLimitedRunAt) {
		return 0, fmt.Errorf("%w (%s, after %s): rate limits are not decided; set the clock right",
			ErrClockPastBudgets, at.UTC().Format(time.RFC3339), MaxLimitedRunAt.Format(time.RFC3339))
	}
	return Nanos(at), nil
}
