package ratelimit_test

import (
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Simulations of the limiters third-party APIs run, exact in integer
// nanoseconds, to check which sluice declarations they never answer with
// a 429 (see docs/rate-limits.md, "Declaring a provider's limit").

// provider is an upstream's limiter: take records a request of the given
// cost arriving at t (nanoseconds, in increasing order) and reports whether
// the provider accepts it. A rejected request leaves no trace.
type provider interface {
	take(t int64, cost int) bool
}

// leakyBucket is a bucket of capacity requests that leaks leak requests
// every `every` nanoseconds, continuously (Shopify's REST Admin API: 40,
// leaking 2 a second). A request that would overflow it is rejected. The
// level is kept in requests × every, so the leak is exact.
type leakyBucket struct {
	capacity, leak, every int64
	level, last           int64
	started               bool
}

func (b *leakyBucket) take(t int64, cost int) bool {
	if b.started {
		b.level = max(0, b.level-(t-b.last)*b.leak)
	}
	b.started, b.last = true, t
	c := int64(cost) * b.every
	if b.level+c > b.capacity*b.every {
		return false
	}
	b.level += c
	return true
}

// tokenBucket holds up to capacity tokens, starts full, and gains refill
// tokens every `every` nanoseconds, continuously (golang.org/x/time/rate,
// Stripe). A request takes cost tokens, and is rejected when there are
// fewer. Tokens are kept in tokens × every.
type tokenBucket struct {
	capacity, refill, every int64
	tokens, last            int64
	started                 bool
}

func (b *tokenBucket) take(t int64, cost int) bool {
	full := b.capacity * b.every
	if !b.started {
		b.tokens = full
	} else {
		b.tokens = min(full, b.tokens+(t-b.last)*b.refill)
	}
	b.started, b.last = true, t
	c := int64(cost) * b.every
	if b.tokens < c {
		return false
	}
	b.tokens -= c
	return true
}

// fixedWindow accepts limit requests in each window [offset + k·width,
// offset + (k+1)·width): a clock-aligned quota such as GitHub's 5,000 an
// hour, reset on the hour.
type fixedWindow struct {
	limit, width, offset int64
	index, count         int64
	started              bool
}

func (w *fixedWindow) take(t int64, cost int) bool {
	i := floorDiv(t-w.offset, w.width)
	if !w.started || i != w.index {
		w.started, w.index, w.count = true, i, 0
	}
	if w.count+int64(cost) > w.limit {
		return false
	}
	w.count += int64(cost)
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// slidingWindow accepts a request when the requests it accepted in the
// last width nanoseconds, this one's cost included, are at most limit: a
// sliding log, as a Redis sorted set trimmed to (t − width, t] keeps it.
// A closed one counts [t − width, t]: a request exactly width earlier
// still counts.
type slidingWindow struct {
	limit, width int64
	closed       bool
	log          []int64
}

func (w *slidingWindow) take(t int64, cost int) bool {
	for len(w.log) > 0 && (w.log[0] <= t-w.width && !w.closed || w.log[0] < t-w.width) {
		w.log = w.log[1:]
	}
	if int64(len(w.log)+cost) > w.limit {
		return false
	}
	for range cost {
		w.log = append(w.log, t)
	}
	return true
}

// admission is one claim sluice admitted: its decision time and cost.
type admission struct {
	at   int64
	cost int
}

// firstRejection sends the admissions' requests to the provider in the
// order they arrive (each at its decision time plus its delay, which
// models the time from a claim to the job's request), and returns the
// first the provider rejects, or -1 when it accepts them all.
func firstRejection(pr provider, adm []admission, delay []int64) int {
	order := make([]int, len(adm))
	for i := range order {
		order[i] = i
	}
	arrive := func(i int) int64 {
		if delay == nil {
			return adm[i].at
		}
		return adm[i].at + delay[i]
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(sign(arrive(a) - arrive(b))) })
	for _, i := range order {
		if !pr.take(arrive(i), adm[i].cost) {
			return i
		}
	}
	return -1
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// pattern says what claims drawn by claims may do.
type pattern struct {
	// span is the provider's window (or leak period): gaps reach 2 spans.
	span int64
	// maxCost above 1 draws costs from 1 to min(maxCost, burst).
	maxCost int
	// lag above 0 lets a claim decide as of up to lag earlier than a
	// claim already charged, as a claim on a snapshot does.
	lag int64
}

// claims drives one budget under p as claims do (Check, then Charge on
// admission: Allow) with an arbitrary pattern of attempts — bursts, gaps
// long and short, a backlog claiming again at the very instant it is told
// it can (several workers polling as fast as they can, serialised on the
// budget's row), polls at random instants — and returns what it admitted.
func claims(t *rapid.T, p ratelimit.Params, pat pattern) []admission {
	var (
		s   ratelimit.State
		out []admission
	)
	now := rapid.Int64Range(0, 3*pat.span).Draw(t, "start")
	s.TAT = now // a budget with no state: TAT = now
	cost := func() int {
		if pat.maxCost <= 1 {
			return 1
		}
		return rapid.IntRange(1, min(pat.maxCost, p.Burst)).Draw(t, "cost")
	}
	try := func(at int64, c int) (bool, int64) {
		ok, earliest := p.Allow(&s, at, c)
		if ok {
			out = append(out, admission{at, c})
		}
		return ok, earliest
	}
	steps := rapid.IntRange(1, 40).Draw(t, "steps")
	for range steps {
		switch rapid.IntRange(0, 5).Draw(t, "step") {
		case 0: // a burst at one instant
			for range rapid.IntRange(1, 2*p.Burst+2).Draw(t, "burst") {
				try(now, cost())
			}
		case 1: // a gap, up to two spans
			now += rapid.Int64Range(0, 2*pat.span).Draw(t, "gap")
		case 2: // a short gap, up to an interval
			now += rapid.Int64Range(0, p.Interval).Draw(t, "short")
		case 3: // a backlog at full speed: claim again when told
			for range rapid.IntRange(1, 300).Draw(t, "backlog") {
				if ok, earliest := try(now, cost()); !ok {
					now = earliest
				}
			}
		case 4: // workers polling at random instants
			for range rapid.IntRange(1, 100).Draw(t, "polls") {
				now += rapid.Int64Range(0, p.Interval).Draw(t, "poll")
				try(now, cost())
			}
		case 5: // a claim deciding on a snapshot, as of a moment ago
			if pat.lag > 0 {
				try(now-rapid.Int64Range(0, pat.lag).Draw(t, "lag"), cost())
			}
		}
	}
	return out
}

// backlog drains a quiet budget at full speed from 0 for d nanoseconds and
// returns how many it admitted.
func backlog(p ratelimit.Params, d int64) int {
	var s ratelimit.State
	n, now := 0, int64(0)
	for now < d {
		ok, earliest := p.Allow(&s, now, 1)
		if ok {
			n++
		} else {
			now = earliest
		}
	}
	return n
}

// declare compiles a declaration, failing the test if it is refused.
func declare(t interface {
	Helper()
	Fatalf(string, ...any)
}, to int, per int64, burst int) ratelimit.Params {
	t.Helper()
	p, _, err := ratelimit.NewParams(to, time.Duration(per), burst)
	if err != nil {
		t.Fatalf("declaration %d per %d ns, burst %d: %v", to, per, burst, err)
	}
	return p
}
