package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Later saturates instead of wrapping round: a wait past 2262 is as long
// as the times reach.
func TestLaterSaturatesInsteadOfWrapping(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	require.Equal(t, now+sec, ratelimit.Later(now, sec))
	require.Equal(t, ratelimit.Never, ratelimit.Later(now, math.MaxInt64))
	require.Equal(t, ratelimit.Never, ratelimit.Later(now, int64(250*365*24*time.Hour)))
	require.Equal(t, ratelimit.Never, ratelimit.Later(ratelimit.Never, 1))
	require.Equal(t, int64(math.MinInt64), ratelimit.Later(-now, math.MinInt64))
	require.Equal(t, now-sec, ratelimit.Later(now, -sec))
}

// A budget held back by Hold admits nothing before the time it was held
// to, however late that is: a hold whose TAT would lie past the end of
// int64 sets it to Never, which admits nothing at all (a TAT that near the
// end must not wrap round in Check, nor admit a tolerance early).
func TestHoldAdmitsNothingBeforeItsTimeEvenAtTheEndOfTime(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	p := params(t, 100, time.Minute, 100)
	for _, until := range []int64{now + int64(time.Hour), ratelimit.Later(now, int64(200*365*24*time.Hour)), ratelimit.Never} {
		var s ratelimit.State
		p.Hold(&s, until)
		require.GreaterOrEqual(t, s.TAT, until)
		require.Equal(t, until, s.NextSlot)
		for _, at := range []int64{now, until - 1, until - p.Tolerance()} {
			ok, earliest := p.Check(s, at, 1)
			require.False(t, ok, "admitted at %d, held until %d", at, until)
			require.GreaterOrEqual(t, earliest, until)
		}
		if until < ratelimit.Never {
			ok, _ := p.Check(s, until, 1)
			require.True(t, ok, "admitted again at the time it was held to")
		}
		// A slot handed out at the end of time saturates too.
		require.Equal(t, until, p.Slot(&s, until, 100))
		require.GreaterOrEqual(t, s.NextSlot, until)
	}
	// Hold never moves a budget back.
	s := ratelimit.State{TAT: now + 10*sec, NextSlot: now + 20*sec}
	p.Hold(&s, now-p.Tolerance())
	require.Equal(t, ratelimit.State{TAT: now + 10*sec, NextSlot: now + 20*sec}, s)
}

// An admission whose TAT would lie past the end of int64 (a long Per near
// 2262) sets it to Never, which admits nothing again, instead of wrapping
// round to a time long past, which would admit everything after it.
func TestAChargePastTheEndOfTimeSaturates(t *testing.T) {
	p := params(t, 1, 100*365*24*time.Hour, 1)
	now := ratelimit.Never - int64(365*24*time.Hour)
	var s ratelimit.State
	ok, _ := p.Allow(&s, now, 1)
	require.True(t, ok)
	require.Equal(t, ratelimit.Never, s.TAT)
	for _, at := range []int64{now, now + sec, ratelimit.Never - 1} {
		ok, _ := p.Check(s, at, 1)
		require.False(t, ok, "admitted again at %d", at)
	}
}
