package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// defaultDrainLimits are the drain scenario's limits, TO/PER:BURST.
const defaultDrainLimits = "50/2s:10,100/1s:2,10/1s:2,20/1s:1,100/1s:10,1000/10s:50"

// drainLimit is one limit the drain scenario measures.
type drainLimit struct {
	to    int
	per   time.Duration
	burst int
	t     time.Duration // the emission interval, as the limit computes it
}

func (l drainLimit) String() string { return fmt.Sprintf("%d/%s:%d", l.to, l.per, l.burst) }

// rate is the limit as --rate takes it.
func (l drainLimit) rate() string { return fmt.Sprintf("%d/%s", l.to, l.per) }

// declared is the drain rate the limit promises a backlog, in jobs/s:
// To − b + 1 per Per.
func (l drainLimit) declared() float64 { return float64(l.to-l.burst+1) / l.per.Seconds() }

// jobs is the backlog that drains for about d after the burst:
// b + (To − b + 1) × d / Per.
func (l drainLimit) jobs(d time.Duration) int {
	return l.burst + int(math.Ceil(float64(l.to-l.burst+1)*d.Seconds()/l.per.Seconds()))
}

// parseLimits reads TO/PER:BURST items separated by commas.
func parseLimits(s string) ([]drainLimit, error) {
	var out []drainLimit
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		rate, burst, ok := strings.Cut(item, ":")
		b, err := strconv.Atoi(burst)
		if !ok || err != nil || b < 1 {
			return nil, cli.Usagef("--limits %q: want TO/PER:BURST with BURST at least 1, e.g. 50/2s:10", item)
		}
		to, per, err := parseRate(rate)
		if err != nil {
			return nil, cli.Usagef("--limits %q: want TO/PER:BURST, e.g. 50/2s:10", item)
		}
		p, _, err := ratelimit.NewParams(to, per, b)
		if err != nil {
			return nil, cli.Usagef("--limits %q: %v", item, err)
		}
		if p.Paused {
			return nil, cli.Usagef("--limits %q: a paused limit never drains", item)
		}
		out = append(out, drainLimit{to: to, per: per, burst: b, t: time.Duration(p.Interval)})
	}
	return out, nil
}

// steadyRate is the drain rate, in jobs/s, of the admissions after the
// first burst ones: (count − 1) / (last − first). It also returns how many
// admissions it was measured over; ok is false below two, or when they
// all fell at one time.
func steadyRate(sorted []time.Time, burst int) (rate float64, over int, ok bool) {
	if len(sorted) <= burst {
		return 0, 0, false
	}
	rest := sorted[burst:]
	span := rest[len(rest)-1].Sub(rest[0])
	if len(rest) < 2 || span <= 0 {
		return 0, len(rest), false
	}
	return float64(len(rest)-1) / span.Seconds(), len(rest), true
}

// drainResult is one limit's measurement.
type drainResult struct {
	l           drainLimit
	n           int
	measured    float64
	over        int
	measuredOK  bool
	busiest     int
	once        int64
	finished    bool
	firstToLast time.Duration
	admitted    int
}

func (r drainResult) errPct() float64 { return (r.measured/r.l.declared() - 1) * 100 }

func (b *bench) drainScenario(ctx context.Context) error {
	limits, err := parseLimits(b.f.limits)
	if err != nil {
		return err
	}
	b.say("bench: drain precision on %s, %s, %s; each backlog on one budget, sized to drain for about %s after its burst (given up after %s)",
		b.store.Dialect().Name(), b.where(), b.dispatcherSays(), b.f.drainFor, b.f.drainTimeout)
	var results []drainResult
	for i, l := range limits {
		r, err := b.drainOne(ctx, i, l)
		if err != nil {
			return fmt.Errorf("limit %s: %w", l, err)
		}
		results = append(results, r)
	}
	b.say("")
	b.say("%-14s %-14s %11s %11s %8s %11s %16s", "limit", "T", "declared/s", "measured/s", "error", "busiest/To", "completed once")
	for _, r := range results {
		measured, errPct := "n/a", "n/a"
		if r.measuredOK {
			measured, errPct = fmt.Sprintf("%.2f", r.measured), fmt.Sprintf("%+.1f%%", r.errPct())
		}
		b.say("%-14s %-14s %11.2f %11s %8s %11s %16s", r.l, r.l.t, r.l.declared(), measured, errPct,
			fmt.Sprintf("%d/%d", r.busiest, r.l.to), fmt.Sprintf("%d/%d", r.once, r.n))
	}
	failed := 0
	for _, r := range results {
		if r.busiest > r.l.to {
			failed++
		}
		measured, errPct := "n/a", "n/a"
		if r.measuredOK {
			measured, errPct = fmt.Sprintf("%.2f", r.measured), fmt.Sprintf("%.1f", r.errPct())
		}
		b.say("drain %s: declared/s %.2f measured/s %s error%% %s T %s busiest %d to %d completed-once %d/%d",
			r.l, r.l.declared(), measured, errPct, r.l.t, r.busiest, r.l.to, r.once, r.n)
	}
	if failed > 0 {
		return fmt.Errorf("FAIL: %d limits let more than To through in a window of Per", failed)
	}
	return nil
}

// drainOne measures one limit: a backlog on budget bench_limited/i, in an
// emptied queue, worked until it drains or the timeout.
func (b *bench) drainOne(ctx context.Context, i int, l drainLimit) (drainResult, error) {
	r := drainResult{l: l, n: l.jobs(b.f.drainFor)}
	b.say("")
	b.say("limit %s: T = %s; %d jobs: %d at once, then %d at a declared %.2f/s",
		l, l.t, r.n, l.burst, r.n-l.burst, l.declared())
	if err := b.reset(ctx); err != nil {
		return r, err
	}
	if err := b.configure(kindsConfig{rate: l.rate(), burst: l.burst}, true); err != nil {
		return r, err
	}
	if err := b.insert(ctx, r.n, func(int) jobs.Item { return jobs.Item{Args: benchLimited{Key: i}} }); err != nil {
		return r, err
	}
	if err := b.analyze(ctx); err != nil {
		return r, err
	}
	began, stop, err := b.startWorkers(ctx, b.pub, true)
	if err != nil {
		return r, err
	}
	stopProgress := make(chan struct{})
	go b.progress(ctx, began, b.t.ran[kLimited].Load, stopProgress)
	finished, werr := waitFor(ctx, b.t.ran[kLimited].Load, int64(r.n), began.Add(b.f.drainTimeout))
	stop()
	close(stopProgress)
	if werr != nil {
		return r, werr
	}
	r.finished = finished
	adm, err := b.admissions(ctx, kLimited)
	if err != nil {
		return r, err
	}
	var ts []time.Time
	for _, t := range adm {
		ts = append(ts, t...) // one budget
	}
	r.admitted = len(ts)
	if len(ts) > 0 {
		r.firstToLast = ts[len(ts)-1].Sub(ts[0])
	}
	r.measured, r.over, r.measuredOK = steadyRate(ts, l.burst)
	r.busiest = ratelimit.BusiestWindow(ts, l.per)
	if !finished {
		b.say("  gave up after %s: %d of %d admitted", b.f.drainTimeout, r.admitted, r.n)
	}
	if r.measuredOK {
		b.say("  declared %.2f/s, measured %.2f/s over the %d admissions after the burst: %+.1f%%; first to last admission %s",
			l.declared(), r.measured, r.over, r.errPct(), r.firstToLast.Round(time.Millisecond))
	} else {
		b.say("  declared %.2f/s, measured: n/a (%d admissions after the burst)", l.declared(), r.over)
	}
	b.say("  busiest %s window: %d admissions (To %d)", l.per, r.busiest, l.to)
	if r.busiest > l.to {
		b.say("FAIL: limit %s: a window of %s held %d admissions, over To = %d", l, l.per, r.busiest, l.to)
	}
	var must []kind
	if finished {
		must = []kind{kLimited}
	}
	checks, err := b.checkOnce(ctx, must...)
	if err != nil {
		return r, err
	}
	r.once = checks[kLimited].once
	return r, nil
}
