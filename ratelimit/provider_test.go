package ratelimit_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/ratelimit"
)

// The mappings of docs/rate-limits.md, "Declaring a provider's limit":
// each property drives a budget under the declaration with arbitrary
// claims (bursts, gaps, a backlog claiming at the instant it may, claims
// deciding on a snapshot as of a moment before others already charged),
// sends their requests to an exact simulation of the provider's limiter,
// and asserts that the provider accepts every one; then that a backlog
// drains at (nearly) the provider's own sustained rate.

var (
	leakPeriods   = []int64{int64(100 * time.Millisecond), sec, 2 * sec, 60 * sec}
	windowLengths = []int64{sec, 60 * sec, int64(time.Hour), int64(24 * time.Hour)}
)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// A leaky bucket of C leaking n every P is To: C + n − 1 per P, Burst: C.
// The declaration is the provider's own limiter (GCRA is the leaky bucket's
// virtual-scheduling form), so it is the best one too. A token bucket of C
// refilled with n every P is the same leaky bucket, counted the other way.
func TestProviderLeakyBucket(t *testing.T) { checkBucket(t, leaky) }

// TestProviderTokenBucket is TestProviderLeakyBucket against a token
// bucket.
func TestProviderTokenBucket(t *testing.T) { checkBucket(t, tokens) }

// The buckets checkBucket checks a declaration against.
func leaky(c, n int, every int64) provider {
	return &leakyBucket{capacity: int64(c), leak: int64(n), every: every}
}

func tokens(c, n int, every int64) provider {
	return &tokenBucket{capacity: int64(c), refill: int64(n), every: every}
}

// checkBucket checks To: C + n − 1 per P, Burst: C against the bucket of C
// that bucket makes, leaking (or refilled with) n every P: it rejects no
// admission, and a backlog drains within 1% of the bucket's rate.
func checkBucket(t *testing.T, bucket func(c, n int, every int64) provider) {
	rapid.Check(t, func(rt *rapid.T) {
		c := rapid.IntRange(1, 100).Draw(rt, "capacity")
		n := rapid.IntRange(1, 50).Draw(rt, "rate")
		every := rapid.SampledFrom(leakPeriods).Draw(rt, "every")
		p := declare(rt, c+n-1, every, c)
		adm := claims(rt, p, pattern{span: max(every, int64(c)*every/int64(n)), maxCost: 3, lag: every})
		if i := firstRejection(bucket(c, n, every), adm, nil); i >= 0 {
			rt.Fatalf("the bucket rejected admission %d of %d at %d", i, len(adm), adm[i].at)
		}
		d := 100 * every
		got, best := backlog(p, d), int64(c)+ceilDiv(d*int64(n), every)-1
		if float64(got) < 0.99*float64(best) {
			rt.Fatalf("a backlog drained %d in %s; the bucket admits %d", got, time.Duration(d), best)
		}
	})
}

// delays draws how long each admission's request takes to reach the
// provider after its claim, 0 to j: often one of the extremes.
func delays(rt *rapid.T, n int, j int64) []int64 {
	r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 0))
	out := make([]int64, n)
	for i := range out {
		switch r.IntN(3) {
		case 0:
			out[i] = 0
		case 1:
			out[i] = j
		default:
			out[i] = r.Int64N(j + 1)
		}
	}
	return out
}

// When a request reaches the provider up to J after its claim, the bucket
// needs J's worth of leak as headroom: Burst: C − ⌈n·J/P⌉, To: Burst + n − 1.
func TestProviderLeakyBucketWithDelay(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := rapid.IntRange(2, 100).Draw(rt, "capacity")
		n := rapid.IntRange(1, 50).Draw(rt, "leak")
		every := rapid.SampledFrom(leakPeriods).Draw(rt, "every")
		j := rapid.Int64Range(0, int64(c-1)*every/int64(n)).Draw(rt, "delay")
		b := c - int(ceilDiv(int64(n)*j, every))
		p := declare(rt, b+n-1, every, b)
		adm := claims(rt, p, pattern{span: max(every, int64(c)*every/int64(n)), lag: every})
		bucket := &leakyBucket{capacity: int64(c), leak: int64(n), every: every}
		if i := firstRejection(bucket, adm, delays(rt, len(adm), j)); i >= 0 {
			rt.Fatalf("the bucket rejected admission %d of %d (burst %d, delay up to %s)", i, len(adm), b, time.Duration(j))
		}
	})
}

// N per window W, fixed (aligned to any clock) or sliding, is To: N per W
// with any burst b: every window of W, aligned or not, holds at most N.
// It is the best: no declaration drains faster than N − b + 1 per W with a
// burst of b without letting some window of W hold more than N.
func TestProviderWindows(t *testing.T) {
	for _, shape := range []string{"fixed", "sliding"} {
		t.Run(shape, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				n := rapid.IntRange(1, 200).Draw(rt, "limit")
				w := rapid.SampledFrom(windowLengths).Draw(rt, "window")
				b := rapid.IntRange(1, n).Draw(rt, "burst")
				p := declare(rt, n, w, b)
				adm := claims(rt, p, pattern{span: w, maxCost: 3, lag: w})
				var pr provider = &slidingWindow{limit: int64(n), width: w}
				if shape == "fixed" {
					pr = &fixedWindow{limit: int64(n), width: w, offset: rapid.Int64Range(0, w-1).Draw(rt, "offset")}
				}
				if i := firstRejection(pr, adm, nil); i >= 0 {
					rt.Fatalf("the %s window rejected admission %d of %d at %d", shape, i, len(adm), adm[i].at)
				}
			})
		})
	}
}

// With a burst of at most N/100, a backlog drains at 99% of N per W or
// more, and the busiest window of W holds N: the bound is met, not just
// respected.
func TestProviderWindowsBacklogKeepsUp(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 1000).Draw(rt, "limit")
		w := rapid.SampledFrom(windowLengths).Draw(rt, "window")
		b := rapid.IntRange(1, max(1, n/100)).Draw(rt, "burst")
		p := declare(rt, n, w, b)
		d := 10 * w
		if got := backlog(p, d); float64(got) < 0.99*10*float64(n) {
			rt.Fatalf("a backlog drained %d in %s; the provider admits %d", got, time.Duration(d), 10*n)
		}
	})
}

// When a request reaches the provider up to J after its claim, a window of
// W at the provider holds requests claimed in W + J: declare Per: W + J.
func TestProviderWindowsWithDelay(t *testing.T) {
	for _, shape := range []string{"fixed", "sliding"} {
		t.Run(shape, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				n := rapid.IntRange(1, 200).Draw(rt, "limit")
				w := rapid.SampledFrom(windowLengths).Draw(rt, "window")
				b := rapid.IntRange(1, n).Draw(rt, "burst")
				j := rapid.Int64Range(0, w).Draw(rt, "delay")
				p := declare(rt, n, w+j, b)
				adm := claims(rt, p, pattern{span: w, lag: w})
				var pr provider = &slidingWindow{limit: int64(n), width: w}
				if shape == "fixed" {
					pr = &fixedWindow{limit: int64(n), width: w, offset: rapid.Int64Range(0, w-1).Draw(rt, "offset")}
				}
				if i := firstRejection(pr, adm, delays(rt, len(adm), j)); i >= 0 {
					rt.Fatalf("the %s window rejected admission %d of %d (delay up to %s)", shape, i, len(adm), time.Duration(j))
				}
			})
		})
	}
}

// "N a second" with no burst stated is To: N per second, Burst: 1: safe
// whichever limiter the provider runs — strict spacing (a bucket of one),
// a token bucket of N, fixed or sliding windows of a second — and a
// backlog drains at N a second.
func TestProviderPerSecondNoBurst(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 500).Draw(rt, "perSecond")
		p := declare(rt, n, sec, 1)
		adm := claims(rt, p, pattern{span: sec, lag: sec})
		for name, pr := range map[string]provider{
			"strict spacing": &leakyBucket{capacity: 1, leak: int64(n), every: sec},
			"token bucket":   &tokenBucket{capacity: int64(n), refill: int64(n), every: sec},
			"fixed window":   &fixedWindow{limit: int64(n), width: sec, offset: rapid.Int64Range(0, sec-1).Draw(rt, "offset")},
			"sliding window": &slidingWindow{limit: int64(n), width: sec},
		} {
			if i := firstRejection(pr, adm, nil); i >= 0 {
				rt.Fatalf("%s rejected admission %d of %d at %d", name, i, len(adm), adm[i].at)
			}
		}
		if got := backlog(p, 10*sec); float64(got) < 0.99*10*float64(n) {
			rt.Fatalf("a backlog drained %d in 10s; the provider admits %d", got, 10*n)
		}
	})
}

// Declarations that look right and are not: each fails against the
// provider (the properties above would catch them), next to its fix.
func TestProviderUnsafeDeclarations(t *testing.T) {
	day := int64(24 * time.Hour)
	for _, tc := range []struct {
		name     string
		provider func() provider
		unsafe   [3]int64 // To, Per, Burst
		safe     [3]int64
		delay    int64 // each request's delay after its claim, alternately 0 and this
	}{{
		// "The bucket empties in 20 s, so 40 + 2·20 = 80 in any 20 s" is
		// true of a closed window of 20 s, and one too many for the
		// half-open windows sluice counts: its interval is 20 s / 41,
		// under the leak's 500 ms.
		name:     "leaky bucket 40 @ 2/s as 80 per 20s",
		provider: func() provider { return &leakyBucket{capacity: 40, leak: 2, every: sec} },
		unsafe:   [3]int64{80, 20 * sec, 40},
		safe:     [3]int64{79, 20 * sec, 40},
	}, {
		name:     "leaky bucket 40 @ 2/s as C + r·Per",
		provider: func() provider { return &leakyBucket{capacity: 40, leak: 2, every: sec} },
		unsafe:   [3]int64{42, sec, 40},
		safe:     [3]int64{41, sec, 40},
	}, {
		// The exact mapping leaves no room for a request that reaches
		// the bucket later than its claim's neighbours.
		name:     "leaky bucket 40 @ 2/s, requests up to 1s after the claim",
		provider: func() provider { return &leakyBucket{capacity: 40, leak: 2, every: sec} },
		delay:    sec,
		unsafe:   [3]int64{41, sec, 40},
		safe:     [3]int64{39, sec, 38},
	}, {
		// 100 a second is 6,000 a minute on average, but 100 at once and
		// then 5,901 a minute puts 198 in one second.
		name:     "100/s windows as 6000 per minute",
		provider: func() provider { return &fixedWindow{limit: 100, width: sec} },
		unsafe:   [3]int64{6000, 60 * sec, 100},
		safe:     [3]int64{100, sec, 1},
	}, {
		// One a second, strictly spaced (a sender number): two every two
		// seconds sends two at once.
		name:     "1/s strict spacing as 2 per 2s",
		provider: func() provider { return &leakyBucket{capacity: 1, leak: 1, every: sec} },
		unsafe:   [3]int64{2, 2 * sec, 2},
		safe:     [3]int64{1, sec, 1},
	}, {
		// A calendar day in local time is 25 hours when the clocks go
		// back: Per must be the provider's longest window.
		name:     "1000 per local calendar day as 1000 per 24h",
		provider: func() provider { return &fixedWindow{limit: 1000, width: day + int64(time.Hour)} },
		unsafe:   [3]int64{1000, day, 1},
		safe:     [3]int64{1000, day + int64(time.Hour), 1},
	}, {
		// A provider that counts the request exactly one window earlier
		// ([t − W, t]) needs a window a nanosecond longer.
		name:     "closed sliding window 2 per 1s",
		provider: func() provider { return &slidingWindow{limit: 2, width: sec, closed: true} },
		unsafe:   [3]int64{2, sec, 1},
		safe:     [3]int64{2, sec + 1, 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(d [3]int64) int {
				p := declare(t, int(d[0]), d[1], int(d[2]))
				// A quiet budget, then a backlog at full speed for three
				// windows.
				var (
					adm []admission
					st  ratelimit.State
					now int64
				)
				for now < 3*max(tc.unsafe[1], tc.safe[1]) {
					if ok, earliest := p.Allow(&st, now, 1); ok {
						adm = append(adm, admission{now, 1})
					} else {
						now = earliest
					}
				}
				var delay []int64
				if tc.delay > 0 {
					// The burst's requests arrive late, the next claims' at once.
					delay = make([]int64, len(adm))
					for i := range delay {
						if i < int(d[2]) {
							delay[i] = tc.delay
						}
					}
				}
				return firstRejection(tc.provider(), adm, delay)
			}
			require.GreaterOrEqual(t, run(tc.unsafe), 0, "the provider rejects a request")
			require.Equal(t, -1, run(tc.safe), "the provider accepts every request")
		})
	}
}
