package ratelimit_test

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/ratelimit"
)

const sec = int64(time.Second)

func params(t *testing.T, to int, per time.Duration, burst int) ratelimit.Params {
	t.Helper()
	p, _, err := ratelimit.NewParams(to, per, burst)
	require.NoError(t, err)
	return p
}

func TestIntervalIsRoundedUp(t *testing.T) {
	p := params(t, 100, time.Minute, 10)
	// 60 s / 91 = 659340659.34 ns, rounded up.
	require.Equal(t, int64(659340660), p.Interval)
	require.Equal(t, 9*int64(659340660), p.Tolerance())
	require.Equal(t, 5*sec, params(t, 1, 5*time.Second, 1).Interval)
}

func TestBurstOneSpacesEvenly(t *testing.T) {
	p := params(t, 1, 5*time.Second, 1)
	var s ratelimit.State
	now := 1000 * sec
	ok, _ := p.Allow(&s, now, 1)
	require.True(t, ok)
	ok, earliest := p.Allow(&s, now+4*sec, 1)
	require.False(t, ok)
	require.Equal(t, now+5*sec, earliest)
	ok, _ = p.Allow(&s, earliest-1, 1)
	require.False(t, ok, "1 ns before the earliest time is denied")
	ok, _ = p.Allow(&s, earliest, 1)
	require.True(t, ok, "the earliest time is admitted")
}

func TestBurstEqualToAdmitsAllAtOnceThenOnePerPer(t *testing.T) {
	p := params(t, 100, time.Minute, 100)
	require.Equal(t, 60*sec, p.Interval)
	var s ratelimit.State
	now := 1000 * sec
	for i := 0; i < 100; i++ {
		ok, _ := p.Allow(&s, now, 1)
		require.True(t, ok, "admission %d", i)
	}
	ok, earliest := p.Allow(&s, now, 1)
	require.False(t, ok)
	require.Equal(t, now+60*sec, earliest)
}

func TestToOne(t *testing.T) {
	p := params(t, 1, time.Second, 1)
	var s ratelimit.State
	ok, _ := p.Allow(&s, 10*sec, 1)
	require.True(t, ok)
	ok, earliest := p.Allow(&s, 10*sec+sec/2, 1)
	require.False(t, ok)
	require.Equal(t, 11*sec, earliest)
}

func TestDenialLeavesStateUnchanged(t *testing.T) {
	p := params(t, 10, time.Second, 3)
	s := ratelimit.State{TAT: 50 * sec, NextSlot: 7}
	before := s
	ok, _ := p.Allow(&s, 40*sec, 1)
	require.False(t, ok)
	require.Equal(t, before, s)
}

func TestMissingBudgetEqualsFullOne(t *testing.T) {
	p := params(t, 10, time.Second, 3)
	now := 100 * sec
	missing := ratelimit.State{}
	full := ratelimit.State{TAT: now - 5*sec, NextSlot: now - sec}
	require.True(t, ratelimit.Idle(full, now))
	for i := 0; i < 5; i++ {
		a, ea := p.Allow(&missing, now, 1)
		b, eb := p.Allow(&full, now, 1)
		require.Equal(t, a, b)
		require.Equal(t, ea, eb)
		require.Equal(t, missing.TAT, full.TAT)
	}
}

func TestSlotsAreOneIntervalApart(t *testing.T) {
	p := params(t, 2, time.Second, 1)
	s := ratelimit.State{TAT: 10 * sec}
	ok, earliest := p.Check(s, 9*sec, 1)
	require.False(t, ok)
	first := p.Slot(&s, earliest, 1)
	second := p.Slot(&s, earliest, 1)
	require.Equal(t, 10*sec, first)
	require.Equal(t, first+p.Interval, second)
	require.Equal(t, int64(10*sec), s.TAT, "slots never charge the budget")
}

func TestCostChargesSeveralTokens(t *testing.T) {
	p := params(t, 10, 10*time.Second, 5)
	var s ratelimit.State
	now := 100 * sec
	ok, _ := p.Allow(&s, now, 5)
	require.True(t, ok)
	ok, earliest := p.Allow(&s, now, 1)
	require.False(t, ok)
	require.Equal(t, now+p.Interval, earliest, "five tokens spent of a burst of five: one interval to wait")
	ok, _ = p.Check(ratelimit.State{}, now, 6)
	require.False(t, ok, "a cost above the burst is never admitted")
}

func TestPausedAdmitsNothing(t *testing.T) {
	p := params(t, 0, time.Second, 0)
	require.True(t, p.Paused)
	var s ratelimit.State
	ok, earliest := p.Allow(&s, 10*sec, 1)
	require.False(t, ok)
	require.Equal(t, ratelimit.Never, earliest)
}

func TestLoosensMeansAShorterIntervalOrTheEndOfAPause(t *testing.T) {
	old := params(t, 10, time.Minute, 1)
	paused := params(t, 0, time.Minute, 1)
	require.True(t, params(t, 20, time.Minute, 1).Loosens(old))
	require.False(t, params(t, 5, time.Minute, 1).Loosens(old), "tighter")
	require.False(t, old.Loosens(old), "the same")
	require.False(t, params(t, 20, time.Minute, 11).Loosens(old), "the same interval, a larger burst")
	require.True(t, old.Loosens(paused), "resumed")
	require.False(t, paused.Loosens(old), "a pause admits nothing")
	require.False(t, old.Loosens(ratelimit.Params{}), "never charged: nothing to loosen")
}

func TestNewParamsRefusesInvalid(t *testing.T) {
	cases := []struct {
		to    int
		per   time.Duration
		burst int
		field string
	}{
		{-1, time.Second, 1, "To"},
		{10, 0, 1, "Per"},
		{10, -time.Second, 1, "Per"},
		{10, time.Second, 11, "Burst"},
		{10, time.Second, -1, "Burst"},
		// A paused limit's burst was not checked: a negative one, or one
		// past what the budgets' column holds, was stored by SetOverride.
		{0, time.Second, -1, "Burst"},
		{0, time.Second, ratelimit.MaxTo + 1, "Burst"},
		{2_000_000, time.Second, 1, "Per/(To-Burst+1)"},
		{ratelimit.MaxTo + 1, time.Hour, 1, "To"},
		{10, 101 * 365 * 24 * time.Hour, 1, "Per"},
		// The review's case: 5,000,000 at once, then one every 30 days, would
		// owe 411,000 years; its tolerance overflowed and a quiet budget never
		// admitted.
		{5_000_000, 30 * 24 * time.Hour, 5_000_000, "Burst × Per/(To-Burst+1)"},
	}
	for _, c := range cases {
		_, _, err := ratelimit.NewParams(c.to, c.per, c.burst)
		require.ErrorIs(t, err, ratelimit.ErrInvalid)
		require.ErrorContains(t, err, c.field)
	}
}

// admissionsWithin checks the central guarantee over sorted admission
// times: no half-open window of length per holds more than to of them.
func maxInWindow(times []int64, per int64) int {
	best := 0
	j := 0
	for i := range times {
		for times[i]-times[j] >= per {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func TestPropertyNoWindowHoldsMoreThanTo(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		to := rapid.IntRange(1, 50).Draw(rt, "to")
		burst := rapid.IntRange(1, to).Draw(rt, "burst")
		perMs := rapid.Int64Range(int64(to-burst+1), 120_000).Draw(rt, "perMs")
		p, _, err := ratelimit.NewParams(to, time.Duration(perMs)*time.Millisecond, burst)
		if err != nil {
			rt.Fatalf("a valid limit refused: %v", err)
		}
		var s ratelimit.State
		now := int64(1_000_000_000)
		var admitted []int64
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			now += rapid.Int64Range(0, perMs*int64(time.Millisecond)/int64(to)*2).Draw(rt, "gap")
			tries := rapid.IntRange(1, 5).Draw(rt, "tries")
			for k := 0; k < tries; k++ {
				before := s
				if ok, _ := p.Allow(&s, now, 1); ok {
					admitted = append(admitted, now)
				} else if s != before {
					rt.Fatalf("a denial changed the state")
				}
			}
		}
		sort.Slice(admitted, func(i, j int) bool { return admitted[i] < admitted[j] })
		if got := maxInWindow(admitted, perMs*int64(time.Millisecond)); got > to {
			rt.Fatalf("%d admissions in one window of %d ms; limit %d burst %d", got, perMs, to, burst)
		}
	})
}

func TestPropertyQuietBudgetAdmitsExactlyBurst(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		to := rapid.IntRange(1, 200).Draw(rt, "to")
		burst := rapid.IntRange(1, to).Draw(rt, "burst")
		p, _, err := ratelimit.NewParams(to, time.Hour, burst)
		if err != nil {
			rt.Skip()
		}
		var s ratelimit.State
		now := int64(5_000_000_000)
		n := 0
		for i := 0; i < to+1; i++ {
			if ok, _ := p.Allow(&s, now, 1); ok {
				n++
			}
		}
		if n != burst {
			rt.Fatalf("a quiet budget admitted %d at once, burst %d", n, burst)
		}
	})
}

func TestPropertyBacklogDrainsAtDeclaredRate(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		to := rapid.IntRange(1, 100).Draw(rt, "to")
		burst := rapid.IntRange(1, to).Draw(rt, "burst")
		perMs := rapid.Int64Range(int64(to-burst+1), 60_000).Draw(rt, "perMs")
		p, _, err := ratelimit.NewParams(to, time.Duration(perMs)*time.Millisecond, burst)
		if err != nil {
			rt.Skip()
		}
		periods := int64(rapid.IntRange(1, 5).Draw(rt, "periods"))
		start := int64(1_000_000_000)
		end := start + periods*perMs*int64(time.Millisecond)
		var s ratelimit.State
		// A backlog that never runs dry: each job comes back at exactly its
		// earliest admission time.
		now, n := start, int64(0)
		for now < end {
			ok, earliest := p.Allow(&s, now, 1)
			if ok {
				n++
				continue
			}
			now = earliest
		}
		want := int64(burst) + periods*int64(to-burst+1) - 1
		if n < want-1 || n > want+1 {
			rt.Fatalf("drained %d in %d periods, want %d ± 1 (to %d burst %d)", n, periods, want, to, burst)
		}
	})
}

func TestBusiestWindowIsHalfOpen(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	times := []time.Time{at(1000), at(0), at(999), at(500)}
	require.Equal(t, 3, ratelimit.BusiestWindow(times, time.Second), "0, 500 and 999 ms share a window; 1000 starts the next")
	require.Equal(t, 4, ratelimit.BusiestWindow(times, time.Second+time.Millisecond))
	require.Zero(t, ratelimit.BusiestWindow(nil, time.Second))
	require.Equal(t, at(1000), times[0], "the input is left as it was")
}

// TestFineLimitsKeepTheirRate checks limits down to the finest interval:
// a backlog drains at the declared rate to within a few parts in a
// million, and no window of Per holds more than To.
func TestFineLimitsKeepTheirRate(t *testing.T) {
	for _, c := range []struct{ to, burst int }{{100_000, 10_000}, {100_000, 1}, {1_000_000, 1}, {123_457, 99}} {
		p := params(t, c.to, time.Second, c.burst)
		var s ratelimit.State
		start := int64(1_700_000_000) * sec
		now := start
		var admitted []int64
		for now < start+3*sec {
			ok, earliest := p.Allow(&s, now, 1)
			if ok {
				admitted = append(admitted, now)
				continue
			}
			now = earliest
		}
		require.LessOrEqual(t, maxInWindow(admitted, sec), c.to, "%+v", c)
		want := float64(c.burst + 3*(c.to-c.burst+1))
		require.InEpsilon(t, want, float64(len(admitted)), 2e-4, "%+v drained %d in 3 s", c, len(admitted))
	}
}

func TestFitsRefusesOnlyCostsAboveTheBurst(t *testing.T) {
	p := params(t, 10, time.Second, 3)
	require.True(t, p.Fits(3))
	require.False(t, p.Fits(4))
	require.True(t, params(t, 0, time.Second, 0).Fits(100), "a paused limit may be resumed with a larger burst")
}

// A limit drains slowly when its backlog, once the burst is spent, drains
// at less than half of To per Per (To − Burst + 1): half is fine.
func TestDrainsSlowlyWhenTheBurstTakesMostOfTo(t *testing.T) {
	for _, c := range []struct {
		to, burst int
		slow      bool
	}{
		{1, 1, false}, {2, 2, false}, {3, 3, true}, {10, 6, false}, {10, 7, true}, {100, 10, false}, {100, 100, true}, {0, 1, false},
	} {
		p, burst, err := ratelimit.NewParams(c.to, time.Minute, c.burst)
		require.NoError(t, err)
		slow, why := ratelimit.Spec{To: c.to, Per: time.Minute, Burst: burst, Params: p}.DrainsSlowly()
		require.Equal(t, c.slow, slow, "%d/1m burst %d: %s", c.to, c.burst, why)
		require.Equal(t, c.slow, why != "")
	}
}
