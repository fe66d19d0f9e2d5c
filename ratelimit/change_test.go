package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/ratelimit"
)

// A looser limit counts the admissions the old one made: 10 per minute
// with a burst of 10, spent at once, then 11 per minute with a burst of 1
// a second later admits its eleventh job only when the first minute is
// nearly over, not within one new interval.
func TestALooserLimitCountsTheOldAdmissionsInItsWindow(t *testing.T) {
	old := params(t, 10, time.Minute, 10) // T = 60 s
	var s ratelimit.State
	now := 1000 * sec
	for range 10 {
		ok, _ := old.Allow(&s, now, 1)
		require.True(t, ok)
	}
	looser := params(t, 11, time.Minute, 1) // T = 5.4545… s
	looser.CarryDebt(&s, now+sec, old)
	// 599 s of debt is 9.983 old intervals: ⌈599 s × 5,454,545,455 ns / 60 s⌉
	// of new ones.
	require.Equal(t, now+sec+54_454_545_460, s.TAT)
	ok, earliest := looser.Check(s, now+sec, 1)
	require.False(t, ok)
	require.Greater(t, earliest, now+50*sec, "ten admissions of the last minute leave room for one more before it ends")
	require.Less(t, earliest, now+60*sec)
}

// A tighter limit counts the old admissions in its own intervals too: 100
// a minute with a burst of 10 (an interval of 60/91 s), ten spent at once,
// then 10 a minute with a burst of 1 (6 s) counts them as ten of its six-
// second steps and admits the next job a minute after them, not once the
// old limit's 6.6 s of debt have passed. After a pause the debt is capped
// at the new burst.
func TestATighterLimitCountsTheOldAdmissionsAndAResumedOneCapsIt(t *testing.T) {
	now := 1000 * sec
	old := params(t, 100, time.Minute, 10)
	var s ratelimit.State
	for range 10 {
		ok, _ := old.Allow(&s, now, 1)
		require.True(t, ok)
	}
	tighter := params(t, 10, time.Minute, 1)
	tighter.CarryDebt(&s, now, old)
	ok, earliest := tighter.Check(s, now, 1)
	require.False(t, ok)
	require.GreaterOrEqual(t, earliest, now+60*sec, "ten admissions at once, under one per 6 s")
	require.Less(t, earliest, now+60*sec+int64(time.Millisecond), "rounded up by no more than a nanosecond a step")

	paused := params(t, 0, time.Minute, 1)
	resumed := params(t, 60, time.Minute, 2)
	capped := ratelimit.State{TAT: now + int64(time.Hour)}
	resumed.CarryDebt(&capped, now, paused)
	require.Equal(t, now+2*resumed.Interval, capped.TAT, "after a pause, admissions resume within one new interval")

	held := ratelimit.State{TAT: ratelimit.Never}
	tighter.CarryDebt(&held, now, old)
	require.Equal(t, ratelimit.Never, held.TAT, "a budget held back for good stays held")
}

// A debt past what admissions can build (an upstream's wait) is kept, not
// multiplied, and cannot wrap round.
func TestATighterLimitKeepsAHugeDebtWithoutOverflow(t *testing.T) {
	old := ratelimit.Params{Interval: 1, Burst: 1}
	tighter := ratelimit.Params{Interval: int64(time.Hour), Burst: 1}
	s := ratelimit.State{TAT: math.MaxInt64 - 1}
	tighter.CarryDebt(&s, 0, old)
	require.Equal(t, int64(math.MaxInt64-1), s.TAT)
	held := ratelimit.State{TAT: 10 * int64(time.Hour)}
	tighter.CarryDebt(&held, 0, old)
	require.Equal(t, 10*int64(time.Hour), held.TAT, "a wait of ten hours stays ten hours")
}

// limitOf draws a limit for a property.
func limitOf(rt *rapid.T, name string) ratelimit.Params {
	to := rapid.IntRange(1, 1000).Draw(rt, name+"To")
	burst := rapid.IntRange(1, to).Draw(rt, name+"Burst")
	perMs := rapid.Int64Range(int64(to-burst+1), 3_600_000).Draw(rt, name+"PerMs")
	p, _, err := ratelimit.NewParams(to, time.Duration(perMs)*time.Millisecond, burst)
	if err != nil {
		rt.Fatalf("a valid limit refused: %v", err)
	}
	return p
}

// Converting a debt its limit's admissions built to another limit and
// back at one instant never lowers it, whichever limit is the looser:
// workers that disagree cannot wear the debt away by taking turns.
func TestPropertyAConversionThereAndBackNeverLowersTheDebt(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := limitOf(rt, "a"), limitOf(rt, "b")
		now := int64(1_000_000_000)
		debt := rapid.Int64Range(1, int64(a.Burst)*a.Interval).Draw(rt, "debt")
		s := ratelimit.State{TAT: now + debt}
		for i := range rapid.IntRange(1, 20).Draw(rt, "turns") {
			before := s.TAT
			b.CarryDebt(&s, now, a)
			a.CarryDebt(&s, now, b)
			if s.TAT < before {
				rt.Fatalf("turn %d lowered the debt from %d to %d ns", i, before-now, s.TAT-now)
			}
		}
	})
}

// An upstream's wait (a 429's Hold) is its time, not admissions: under any
// limit the budget changes to, nothing is admitted before it ends, nor
// later than the new limit's burst of intervals after it (an hour under 10
// a second, then 1 a minute, was held 600 hours for a while).
func TestPropertyAHoldOutlastsAChangeOfLimitUnmultiplied(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := limitOf(rt, "a"), limitOf(rt, "b")
		now := int64(1_000_000_000)
		var s ratelimit.State
		for range rapid.IntRange(0, 5).Draw(rt, "admitted") {
			a.Allow(&s, now, 1)
		}
		until := now + rapid.Int64Range(1, int64(24*time.Hour)).Draw(rt, "hold")
		a.Hold(&s, until)
		later := now + rapid.Int64Range(0, until-now-1).Draw(rt, "change")
		// A wait longer than what either limit's admissions can build:
		// a shorter one is as admissions would leave the budget, and
		// converts as they do.
		room := max(int64(a.Burst)*a.Interval, int64(b.Burst)*b.Interval/b.Interval*a.Interval)
		if s.TAT-later <= room+a.Interval {
			rt.Skip("a wait as short as admissions")
		}
		b.CarryDebt(&s, later, a)
		_, earliest := b.Check(s, later, 1)
		if earliest < until {
			rt.Fatalf("admitted %d ns before the wait's end", until-earliest)
		}
		if most := max(until, later+int64(b.Burst)*b.Interval+int64(a.Burst)*b.Interval); earliest > most+b.Interval {
			rt.Fatalf("held %d ns past the wait's end", earliest-until)
		}
	})
}

// Two workers that see the limit differently (a rolling deploy, or an
// override one has read and the other not yet) each prepare the budget
// under their own limit: each converts the debt it finds to its own
// intervals and records its limit. Sixty claims of each in 60 ms must not
// wear the debt away: under one per 5 s or one per 6 s, nothing is
// admitted 60 ms after an admission.
func TestAlternatingLimitsDoNotWearTheDebtAway(t *testing.T) {
	old := params(t, 10, time.Minute, 1)    // T = 6 s
	looser := params(t, 12, time.Minute, 1) // T = 5 s
	require.True(t, looser.Loosens(old))
	var s ratelimit.State
	now := 1000 * sec
	ok, _ := old.Allow(&s, now, 1)
	require.True(t, ok)
	for i := range 60 {
		at := now + int64(i)*int64(time.Millisecond)
		looser.CarryDebt(&s, at, old)
		old.CarryDebt(&s, at, looser)
	}
	ok, earliest := looser.Check(s, now+60*int64(time.Millisecond), 1)
	require.False(t, ok, "admitted again 60 ms later; TAT is %v after the admission", time.Duration(s.TAT-now))
	require.GreaterOrEqual(t, earliest, now+5*sec, "no sooner than one new interval after the admission")
}

// Two workers whose limits differ only in their bursts (10 a minute with a
// burst of 10, and with a burst of 1) take turns on a spent budget: the one
// with the burst must not read the other's converted debt as room for its
// burst again. Over ten minutes of turns every second the count cannot
// run away (no minute holds twice To: what each turn cannot see is what the
// other limit's pace forgave, see docs/rate-limits.md), and the budget
// keeps admitting.
func TestAlternatingBurstsDoNotSpendTheBurstTwice(t *testing.T) {
	bursty := params(t, 10, time.Minute, 10) // T = 60 s
	steady := params(t, 10, time.Minute, 1)  // T = 6 s
	var s ratelimit.State
	stored := bursty
	now := 1000 * sec
	for range 10 {
		ok, _ := bursty.Allow(&s, now, 1)
		require.True(t, ok)
	}
	turn := func(p ratelimit.Params, at int64) bool {
		p.CarryDebt(&s, at, stored)
		stored = p
		ok, _ := p.Allow(&s, at, 1)
		return ok
	}
	for i := range 3 {
		at := now + int64(i)*100*int64(time.Millisecond)
		require.False(t, turn(steady, at), "turn %d: the steady limit admitted an eleventh job in the minute", i)
		require.False(t, turn(bursty, at), "turn %d: the bursty limit spent its burst again", i)
	}
	starts := make([]time.Time, 10, 40)
	for i := range starts {
		starts[i] = time.Unix(0, now)
	}
	for i := range 600 {
		at := now + int64(i+1)*sec
		p := steady
		if i%2 == 1 {
			p = bursty
		}
		if turn(p, at) {
			starts = append(starts, time.Unix(0, at))
		}
	}
	require.LessOrEqual(t, ratelimit.BusiestWindow(starts, time.Minute), 2*10)
	require.GreaterOrEqual(t, len(starts)-10, 9, "one a minute at least, after the first")
}

// A budget whose conversion left it owing more intervals than the new
// burst records the burst its debt stands for; one within the burst, or
// past it by no more than rounding, records the limit as it is.
func TestCoveringRaisesTheBurstOnlyForAConvertedDebtPastIt(t *testing.T) {
	p := params(t, 60, time.Minute, 1) // T = 1 s
	now := 1000 * sec
	require.Equal(t, p, p.Covering(ratelimit.State{TAT: now + sec}, now), "one interval owed: the burst covers it")
	require.Equal(t, p, p.Covering(ratelimit.State{TAT: now + sec + 999}, now), "past it by rounding")
	raised := p.Covering(ratelimit.State{TAT: now + 10*sec}, now)
	require.Equal(t, 10, raised.Burst, "ten intervals owed")
	require.Equal(t, p.Interval, raised.Interval)
	require.Equal(t, p, p.Covering(ratelimit.State{TAT: ratelimit.Never}, now), "held for good")
}
