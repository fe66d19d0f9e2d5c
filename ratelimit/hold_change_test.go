package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "When the upstream says 429": a 429 holds the
// budget back "no job sharing any of them is admitted before that time.
// The budget resumes at its steady rate", and the wait "is capped at
// WorkerConfig.MaxRetryAfter (1 hour by default), so a broken header
// cannot park a budget for days". A hold is a wait the upstream asked for,
// not admissions; but CarryDebt now scales every debt up by the ratio of
// the intervals when the limit tightens, so a one-hour hold under 10 a
// second followed by an override of 1 a minute (what an operator does on
// seeing 429s) holds the budget for 600 hours: 25 days.
func TestAHoldFollowedByATighterLimitIsNotMultipliedIntoDays(t *testing.T) {
	old := params(t, 10, time.Second, 1) // T = 100 ms
	now := 1000 * sec
	var st ratelimit.State
	until := now + int64(time.Hour) // RetryAfter, at MaxRetryAfter's default cap
	old.Hold(&st, until)
	require.Equal(t, until, st.TAT)

	tighter := params(t, 1, time.Minute, 1) // T = 60 s
	later := now + sec                      // the next claim, a second later, under the override
	tighter.CarryDebt(&st, later, old)
	_, earliest := tighter.Check(st, later, 1)
	require.LessOrEqual(t, earliest, until+tighter.Interval,
		"the upstream asked for an hour; the budget is held until %s after the 429 (%.0f hours)",
		time.Duration(earliest-now), time.Duration(earliest-now).Hours())
}
