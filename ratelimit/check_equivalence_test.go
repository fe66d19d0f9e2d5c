package ratelimit_test

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/ratelimit"
)

// oldCheck is Check as of e554467, before it was rewritten to avoid
// overflow.
func oldCheck(p ratelimit.Params, s ratelimit.State, now int64, cost int) (bool, int64) {
	if p.Paused || cost > p.Burst {
		return false, ratelimit.Never
	}
	c := int64(cost)
	base := max(s.TAT, now)
	if base+c*p.Interval-now <= int64(p.Burst)*p.Interval {
		return true, now
	}
	return false, s.TAT - int64(p.Burst-cost)*p.Interval
}

// inRange reports whether oldCheck's arithmetic stays inside int64 (the
// inputs on which the rewrite must be exactly equivalent).
func inRange(p ratelimit.Params, s ratelimit.State, now int64, cost int) bool {
	b := func(v int64) *big.Int { return big.NewInt(v) }
	lo, hi := b(math.MinInt64), b(math.MaxInt64)
	ok := func(x *big.Int) bool { return x.Cmp(lo) >= 0 && x.Cmp(hi) <= 0 }
	base := b(max(s.TAT, now))
	ct := new(big.Int).Mul(b(int64(cost)), b(p.Interval))
	sum := new(big.Int).Add(base, ct)
	diff := new(big.Int).Sub(sum, b(now))
	bt := new(big.Int).Mul(b(int64(p.Burst)), b(p.Interval))
	bc := new(big.Int).Mul(b(int64(p.Burst-cost)), b(p.Interval))
	e := new(big.Int).Sub(b(s.TAT), bc)
	return ok(ct) && ok(sum) && ok(diff) && ok(bt) && ok(bc) && ok(e) && s.TAT != ratelimit.Never
}

// The rewritten Check decides exactly as the old formula for every input
// the old one did not overflow on.
func TestCheckDecidesAsTheFormulaBeforeItsOverflowRewrite(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := ratelimit.Params{
			Interval: rapid.Int64Range(1, 1<<40).Draw(rt, "interval"),
			Burst:    rapid.IntRange(1, 100000).Draw(rt, "burst"),
			Paused:   rapid.Bool().Draw(rt, "paused"),
		}
		now := rapid.Int64Range(-(1<<62), 1<<62).Draw(rt, "now")
		var tat int64
		switch rapid.IntRange(0, 3).Draw(rt, "tatKind") {
		case 0: // near now, within a few bursts
			tat = now + rapid.Int64Range(-3*int64(p.Burst)*p.Interval, 3*int64(p.Burst)*p.Interval).Draw(rt, "off")
		case 1:
			tat = rapid.Int64Range(-(1<<62), 1<<62).Draw(rt, "tat")
		case 2:
			tat = now + rapid.Int64Range(-1000, 1000).Draw(rt, "small")
		default:
			// Tight boundary: where a cost-c job is first admitted.
			c := rapid.IntRange(1, p.Burst).Draw(rt, "c0")
			tat = now + int64(p.Burst-c)*p.Interval + rapid.Int64Range(-2, 2).Draw(rt, "edge")
		}
		cost := rapid.IntRange(1, p.Burst+1).Draw(rt, "cost")
		s := ratelimit.State{TAT: tat, NextSlot: rapid.Int64().Draw(rt, "next")}
		if !inRange(p, s, now, cost) {
			rt.Skip("old formula overflows")
		}
		ok1, e1 := oldCheck(p, s, now, cost)
		ok2, e2 := p.Check(s, now, cost)
		if ok1 != ok2 || e1 != e2 {
			rt.Fatalf("old (%v, %d) new (%v, %d) for p=%+v s=%+v now=%d cost=%d", ok1, e1, ok2, e2, p, s, now, cost)
		}
	})
}

// A table of hand-picked in-range cases, boundaries included.
func TestCheckAtItsBoundariesDecidesAsTheFormulaBeforeItsOverflowRewrite(t *testing.T) {
	for _, T := range []int64{1, 7, 1000, int64(1e9), 1 << 33} {
		for _, b := range []int{1, 2, 5, 100} {
			for _, paused := range []bool{false, true} {
				p := ratelimit.Params{Interval: T, Burst: b, Paused: paused}
				for _, now := range []int64{0, 1, 1_700_000_000_000_000_000, -5} {
					for off := -int64(b+2) * T; off <= int64(b+2)*T; off += max(T/3, 1) {
						for _, d := range []int64{-1, 0, 1} {
							s := ratelimit.State{TAT: now + off + d}
							for c := 1; c <= b+1; c++ {
								ok1, e1 := oldCheck(p, s, now, c)
								ok2, e2 := p.Check(s, now, c)
								if ok1 != ok2 || e1 != e2 {
									t.Fatalf("old (%v,%d) new (%v,%d) p=%+v s=%+v now=%d c=%d", ok1, e1, ok2, e2, p, s, now, c)
								}
							}
						}
					}
				}
			}
		}
	}
}
