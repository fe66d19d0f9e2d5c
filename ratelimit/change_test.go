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
// old limit's 6.6 s of debt have passed.
func TestATighterLimitCountsTheOldAdmissionsAndAResumedOneCapsIt(t *testing.T) {
	old := params(t, 100, time.Minute, 10)
	var s ratelimit.State
	now := 1000 * sec
	for range 10 {
		ok, _ := old.Allow(&s, now, 1)
		require.True(t, ok)
	}
	tighter := params(t, 10, time.Minute, 1)
	counted := s
	tighter.CarryDebt(&counted, now, old)
	ok, earliest := tighter.Check(counted, now, 1)
	require.False(t, ok)
	require.GreaterOrEqual(t, earliest, now+60*sec, "ten admissions at once, under one per 6 s")
	require.Less(t, earliest, now+60*sec+int64(time.Millisecond), "rounded up by no more than a nanosecond a step")

	paused := params(t, 0, time.Minute, 1)
	resumed := params(t, 60, time.Minute, 2)
	capped := s
	resumed.CarryDebt(&capped, now, paused)
	require.Equal(t, now+2*resumed.Interval, capped.TAT, "after a pause, admissions resume within one new interval")

	held := ratelimit.State{TAT: ratelimit.Never}
	tighter.CarryDebt(&held, now, old)
	require.Equal(t, ratelimit.Never, held.TAT, "a budget held back for good stays held")
}

// A debt counted in an interval far longer cannot wrap round: it stops at
// Never.
func TestATighterLimitConvertsAHugeDebtWithoutOverflow(t *testing.T) {
	old := ratelimit.Params{Interval: 1, Burst: 1}
	tighter := ratelimit.Params{Interval: int64(time.Hour), Burst: 1}
	s := ratelimit.State{TAT: math.MaxInt64 - 1}
	tighter.CarryDebt(&s, 0, old)
	require.Equal(t, ratelimit.Never, s.TAT)
	s = ratelimit.State{TAT: 10 * sec}
	tighter.CarryDebt(&s, 0, old)
	require.Equal(t, ratelimit.Never, s.TAT, "ten billion admissions of an hour each lie past 2262")
}

// Converting a debt to another limit and back at one instant never lowers
// it, whichever limit is the looser: workers that disagree cannot wear the
// debt away by taking turns, however often they do.
func TestPropertyAConversionThereAndBackNeverLowersTheDebt(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := func(name string) ratelimit.Params {
			to := rapid.IntRange(1, 1000).Draw(rt, name+"To")
			burst := rapid.IntRange(1, to).Draw(rt, name+"Burst")
			perMs := rapid.Int64Range(int64(to-burst+1), 3_600_000).Draw(rt, name+"PerMs")
			p, _, err := ratelimit.NewParams(to, time.Duration(perMs)*time.Millisecond, burst)
			if err != nil {
				rt.Fatalf("a valid limit refused: %v", err)
			}
			return p
		}
		a, b := limit("a"), limit("b")
		now := int64(1_000_000_000)
		debt := rapid.Int64Range(1, int64(24*time.Hour)).Draw(rt, "debt")
		s := ratelimit.State{TAT: now + debt}
		for i := range rapid.IntRange(1, 50).Draw(rt, "turns") {
			before := s.TAT
			b.CarryDebt(&s, now, a)
			a.CarryDebt(&s, now, b)
			if s.TAT < before {
				rt.Fatalf("turn %d lowered the debt from %d to %d ns", i, before-now, s.TAT-now)
			}
		}
	})
}

// The conversion cannot overflow: a debt near the largest time, counted
// in an interval just shorter, stays within it.
func TestALooserLimitConvertsAHugeDebtWithoutOverflow(t *testing.T) {
	old := ratelimit.Params{Interval: int64(time.Hour), Burst: 1}
	looser := ratelimit.Params{Interval: int64(time.Hour) - 1, Burst: 1}
	s := ratelimit.State{TAT: math.MaxInt64 - 1}
	looser.CarryDebt(&s, 0, old)
	require.Greater(t, s.TAT, int64(0))
	require.LessOrEqual(t, s.TAT, int64(math.MaxInt64-1))
}

// Under any limit followed by any looser one, no window of the looser
// limit's Per that holds one of its admissions holds more than its To, the
// window that spans the change included. (The old limit's admissions alone
// may already exceed it: a looser interval can come with a smaller To.
// The new limit then admits nothing until they leave its window.)
func TestPropertyALooserLimitKeepsItsToAcrossTheChange(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := func(name string) (ratelimit.Params, int, int64) {
			to := rapid.IntRange(1, 40).Draw(rt, name+"To")
			burst := rapid.IntRange(1, to).Draw(rt, name+"Burst")
			perMs := rapid.Int64Range(int64(to-burst+1), 60_000).Draw(rt, name+"PerMs")
			p, _, err := ratelimit.NewParams(to, time.Duration(perMs)*time.Millisecond, burst)
			if err != nil {
				rt.Fatalf("a valid limit refused: %v", err)
			}
			return p, to, perMs * int64(time.Millisecond)
		}
		old, _, oldPer := limit("old")
		looser, to, per := limit("new")
		if !looser.Loosens(old) {
			rt.Skip("not looser")
		}
		var s ratelimit.State
		now := int64(1_000_000_000)
		var admitted []int64
		var fresh []int64 // the new limit's admissions
		run := func(p ratelimit.Params, span int64, label string) {
			steps := rapid.IntRange(0, 200).Draw(rt, label+"Steps")
			for range steps {
				now += rapid.Int64Range(0, span).Draw(rt, label+"Gap")
				for range rapid.IntRange(1, 4).Draw(rt, label+"Tries") {
					if ok, _ := p.Allow(&s, now, 1); ok {
						admitted = append(admitted, now)
						if p == looser {
							fresh = append(fresh, now)
						}
					}
				}
			}
		}
		run(old, oldPer/8+1, "old")
		now += rapid.Int64Range(0, oldPer).Draw(rt, "change")
		looser.CarryDebt(&s, now, old)
		run(looser, per/8+1, "new")
		for _, end := range fresh {
			in := 0
			for _, a := range admitted {
				if a > end-per && a <= end {
					in++
				}
			}
			if in > to {
				rt.Fatalf("%d admissions in the window of the new Per (%d ns) up to %d; the new To is %d", in, per, end, to)
			}
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
// burst of 10, and with a burst of 1) take turns on a spent budget: the
// one with the burst must not read the other's converted debt as room for
// its burst again.
func TestAlternatingBurstsDoNotSpendTheBurstTwice(t *testing.T) {
	bursty := params(t, 10, time.Minute, 10) // T = 60 s
	steady := params(t, 10, time.Minute, 1)  // T = 6 s
	var s ratelimit.State
	now := 1000 * sec
	for range 10 {
		ok, _ := bursty.Allow(&s, now, 1)
		require.True(t, ok)
	}
	for i := range 3 {
		at := now + int64(i)*100*int64(time.Millisecond)
		steady.CarryDebt(&s, at, bursty)
		ok, _ := steady.Allow(&s, at, 1)
		require.False(t, ok, "turn %d: the steady limit admitted an eleventh job in the minute", i)
		bursty.CarryDebt(&s, at, steady)
		ok, _ = bursty.Allow(&s, at, 1)
		require.False(t, ok, "turn %d: the bursty limit spent its burst again", i)
	}
}
