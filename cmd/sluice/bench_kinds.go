package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// The benchmark's job kinds, all no-ops in the bench queue.

// benchNoop is an unlimited no-op.
type benchNoop struct{}

func (benchNoop) Kind() string { return "bench_noop" }

// benchLimited is a rate-limited no-op, with its budget key in the args.
type benchLimited struct{ Key int }

func (benchLimited) Kind() string { return "bench_limited" }

// lightBudgets is how many budgets a rate-limited light load
// (--light-rate) spreads its jobs over.
const lightBudgets = 10

// benchStamp carries its enqueue time, for latency.
type benchStamp struct{ At int64 }

func (benchStamp) Kind() string { return "bench_stamp" }

// benchFlood is the flood scenario's rate-limited no-op, on one budget.
type benchFlood struct{}

func (benchFlood) Kind() string { return "bench_flood" }

// benchFair is the fair scenario's no-op: its fairness key and the key's
// weight are in the args (declared fair only when the run says so).
type benchFair struct{ Key, W int }

func (benchFair) Kind() string { return "bench_fair" }

// kind indexes the per-kind counts.
type kind int

const (
	kNoop kind = iota
	kStamp
	kLimited
	kFlood
	kFair
	nKinds
)

var kindNames = [nKinds]string{"bench_noop", "bench_stamp", "bench_limited", "bench_flood", "bench_fair"}

func kindOf(name string) (kind, bool) {
	for k, n := range kindNames {
		if n == name {
			return kind(k), true
		}
	}
	return 0, false
}

// kindsConfig says which limited kinds a run declares. The parent and
// every bench-worker child build the same registry from it.
type kindsConfig struct {
	// rate is bench_limited's limit, N/PER with burst; "" leaves the kind
	// undeclared.
	rate  string
	burst int
	// floodRate is bench_flood's limit, N/PER with burst 1 on one budget;
	// "" leaves the kind undeclared.
	floodRate string
	// lightRate is bench_stamp's limit, N/PER with burst N on each of
	// lightBudgets budgets; "" leaves it unlimited.
	lightRate string
	// fair declares bench_fair with its fairness key and weight; without
	// it bench_fair is a plain kind.
	fair bool
}

// args are the bench-worker flags that declare the same kinds.
func (kc kindsConfig) args() []string {
	var out []string
	if kc.rate != "" {
		out = append(out, "--rate", kc.rate, "--burst", strconv.Itoa(kc.burst))
	}
	if kc.floodRate != "" {
		out = append(out, "--flood-rate", kc.floodRate)
	}
	if kc.lightRate != "" {
		out = append(out, "--light-rate", kc.lightRate)
	}
	if kc.fair {
		out = append(out, "--fair")
	}
	return out
}

// registerKinds declares the bench kinds in reg, with handlers that count
// into t.
func registerKinds(reg *jobs.Registry, kc kindsConfig, t *tally) error {
	q := jobs.Queue(benchQueue)
	must(jobs.Register(reg, func(context.Context, *jobs.Job[benchNoop]) error {
		t.ran[kNoop].Add(1)
		return nil
	}, q))
	stamp := []jobs.RegisterOption{q}
	if kc.lightRate != "" {
		to, per, err := parseRate(kc.lightRate)
		if err != nil {
			return err
		}
		lim := ratelimit.Limit[benchStamp]{To: to, Per: per, Burst: to, Key: func(a benchStamp) any { return a.At % lightBudgets }}
		stamp = append(stamp, jobs.RateLimit(lim))
	}
	err := jobs.Register(reg, func(_ context.Context, j *jobs.Job[benchStamp]) error {
		t.addLatency(latSample{at: j.Args.At, d: time.Since(time.Unix(0, j.Args.At))})
		t.ran[kStamp].Add(1)
		return nil
	}, stamp...)
	if err != nil {
		return cli.Usagef("--light-rate: %v", err)
	}
	var fair []jobs.RegisterOption
	if kc.fair {
		fair = append(fair, jobs.Fair(func(a benchFair) any { return a.Key }), jobs.FairWeight(func(a benchFair) int { return max(a.W, 1) }))
	}
	must(jobs.Register(reg, func(_ context.Context, j *jobs.Job[benchFair]) error {
		t.addFairStart(j.Args.Key)
		t.ran[kFair].Add(1)
		return nil
	}, append(fair, q)...))
	// bench_limited is declared without its limit when the run sets none,
	// so that the loose scenario's unlimited rounds run the same jobs.
	limited := []jobs.RegisterOption{q}
	if kc.rate != "" {
		to, per, err := parseRate(kc.rate)
		if err != nil {
			return err
		}
		lim := ratelimit.Limit[benchLimited]{To: to, Per: per, Burst: kc.burst, Key: func(a benchLimited) any { return a.Key }}
		limited = append(limited, jobs.RateLimit(lim))
	}
	err = jobs.Register(reg, func(_ context.Context, j *jobs.Job[benchLimited]) error {
		if t.recordStarts {
			t.addStart(j.Args.Key, time.Now())
		}
		t.ran[kLimited].Add(1)
		return nil
	}, limited...)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if kc.floodRate != "" {
		to, per, err := parseRate(kc.floodRate)
		if err != nil {
			return err
		}
		lim := ratelimit.Limit[benchFlood]{To: to, Per: per, Burst: 1, Key: "global"}
		err = jobs.Register(reg, func(context.Context, *jobs.Job[benchFlood]) error {
			t.ran[kFlood].Add(1)
			return nil
		}, q, jobs.RateLimit(lim))
		if err != nil {
			return cli.Usagef("--flood-rate: %v", err)
		}
	}
	return nil
}

// latSample is one latency job: when it was enqueued (Unix ns) and how
// long it took to start.
type latSample struct {
	at int64
	d  time.Duration
}

// tally is what one run's handlers and hooks saw: in this process, or
// added up from the children's reports.
type tally struct {
	ran      [nKinds]atomic.Int64
	deferred [nKinds]atomic.Int64 // deferrals, parked ones included
	parked   [nKinds]atomic.Int64

	mu     sync.Mutex
	lat    []latSample
	starts map[int][]time.Time // handler starts of limited jobs per budget key, in this process only
	// recordStarts keeps starts: only when the database cannot say when
	// jobs were admitted (--delete), since the lock it takes costs the
	// limited handler what the unlimited one does not pay.
	recordStarts bool
	// fairStarts, when not nil, records each bench_fair start, in order,
	// and fairClaims each claim that took jobs: when it began and ended.
	fairStarts *[]fairStart
	fairClaims *[][2]time.Time
}

// fairStart is one bench_fair job's start: its key and when.
type fairStart struct {
	key int
	at  time.Time
}

func (t *tally) addFairStart(key int) {
	if t.fairStarts == nil {
		return
	}
	t.mu.Lock()
	*t.fairStarts = append(*t.fairStarts, fairStart{key: key, at: time.Now()})
	t.mu.Unlock()
}

func newTally() *tally { return &tally{starts: map[int][]time.Time{}} }

func (t *tally) addLatency(s latSample) {
	t.mu.Lock()
	t.lat = append(t.lat, s)
	t.mu.Unlock()
}

func (t *tally) addStart(key int, at time.Time) {
	t.mu.Lock()
	t.starts[key] = append(t.starts[key], at)
	t.mu.Unlock()
}

func (t *tally) latencies() []latSample {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]latSample(nil), t.lat...)
}

// hooks count the deferrals the worker reports.
func (t *tally) hooks() jobs.Hooks {
	return jobs.Hooks{OnClaim: func(e jobs.ClaimEvent) {
		if t.fairClaims == nil || e.Claimed == 0 {
			return
		}
		now := time.Now()
		t.mu.Lock()
		*t.fairClaims = append(*t.fairClaims, [2]time.Time{now.Add(-e.Duration), now})
		t.mu.Unlock()
	}, OnDefer: func(e jobs.DeferEvent) {
		k, ok := kindOf(e.Kind)
		if !ok || e.Shadow {
			return
		}
		t.deferred[k].Add(int64(e.Count))
		t.parked[k].Add(int64(e.Parked))
	}}
}
