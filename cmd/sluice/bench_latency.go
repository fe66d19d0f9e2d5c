package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

const (
	// lightJobs are enqueued one every lightEvery: 50 jobs/s for 10 s.
	lightJobs  = 500
	lightEvery = 20 * time.Millisecond
	// lightWait is how long the last light job may take to start.
	lightWait = 10 * time.Second
)

// latency enqueues one job every 20 ms for 10 s from a second connection
// pool, so that workers learn of them only as another process's workers
// would (NOTIFY on PostgreSQL, polling elsewhere), and reports how long
// each took from enqueue to its handler's start.
func (b *bench) latency(ctx context.Context) error {
	b.say("bench: enqueue-to-start latency on %s, one job every 20ms for 10s, %s", b.store.Dialect().Name(), b.where())
	ws := b.pub
	if b.f.procs == 0 {
		var err error
		if ws, err = b.open(ctx); err != nil {
			return err
		}
		defer ws.Close()
	}
	_, stop, err := b.startWorkers(ctx, ws, false)
	if err != nil {
		return err
	}
	if b.f.procs == 0 {
		time.Sleep(500 * time.Millisecond) // let the workers start listening
	}
	sent, err := b.lightLoad(ctx)
	stop()
	if err != nil {
		return err
	}
	all := lightRun{sent: sent, samples: b.t.latencies()}.stats()
	if all.n == 0 {
		return errors.New("no job started")
	}
	b.say("%s", all)
	if _, err := b.checkOnce(ctx, kStamp); err != nil {
		return err
	}
	b.say("latency p50: %s", fmtLatency(all.p50))
	return nil
}

// lightLoad enqueues lightJobs benchStamp jobs, one every lightEvery,
// from the bench's own pool, then waits up to lightWait for them to start.
// It returns the jobs' enqueue times.
func (b *bench) lightLoad(ctx context.Context) ([]int64, error) {
	sent := make([]int64, 0, lightJobs)
	next := time.Now()
	for i := 0; i < lightJobs && ctx.Err() == nil; i++ {
		at := time.Now().UnixNano()
		if _, err := b.client.Enqueue(ctx, benchStamp{At: at}); err != nil {
			return sent, err
		}
		sent = append(sent, at)
		b.enqueued[kindNames[kStamp]]++
		next = next.Add(lightEvery)
		time.Sleep(time.Until(next))
	}
	_, err := waitFor(ctx, b.t.ran[kStamp].Load, int64(len(sent)), time.Now().Add(lightWait))
	return sent, err
}

// never stands for the latency of a job that had not started when the
// measurement ended.
const never = time.Duration(math.MaxInt64)

// latStats summarizes latencies.
type latStats struct {
	n, missing          int
	p50, p90, p99, peak time.Duration
}

func (s latStats) String() string {
	missing := ""
	if s.missing > 0 {
		missing = fmt.Sprintf(" (%d never started)", s.missing)
	}
	return fmt.Sprintf("samples %d%s  p50 %s  p90 %s  p99 %s  max %s", s.n, missing, fmtLatency(s.p50), fmtLatency(s.p90), fmtLatency(s.p99), fmtLatency(s.peak))
}

// lightRun is a light load's jobs: when each was enqueued (Unix ns) and
// the latencies of those that started.
type lightRun struct {
	sent    []int64
	samples []latSample
}

// first keeps the jobs enqueued in the load's first d.
func (r lightRun) first(d time.Duration) lightRun {
	if len(r.sent) == 0 {
		return r
	}
	end := r.sent[0] + int64(d)
	var out lightRun
	for _, at := range r.sent {
		if at < end {
			out.sent = append(out.sent, at)
		}
	}
	for _, s := range r.samples {
		if s.at < end {
			out.samples = append(out.samples, s)
		}
	}
	return out
}

// pool puts runs together.
func pool(runs []lightRun) lightRun {
	var out lightRun
	for _, r := range runs {
		out.sent = append(out.sent, r.sent...)
		out.samples = append(out.samples, r.samples...)
	}
	return out
}

// stats summarizes the latencies; a job that never started counts as
// never, so it weighs on the high percentiles instead of vanishing.
func (r lightRun) stats() latStats {
	ds := make([]time.Duration, 0, len(r.sent))
	for _, s := range r.samples {
		ds = append(ds, s.d)
	}
	st := latStats{n: len(ds), missing: max(0, len(r.sent)-len(ds))}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	for i := 0; i < st.missing; i++ {
		ds = append(ds, never)
	}
	if len(ds) == 0 {
		return st
	}
	st.p50, st.p90, st.p99, st.peak = quantile(ds, 0.5), quantile(ds, 0.9), quantile(ds, 0.99), ds[len(ds)-1]
	return st
}

// quantile picks from sorted durations as the bench always has.
func quantile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

func fmtLatency(d time.Duration) string {
	if d == never {
		return "never"
	}
	return d.Round(10 * time.Microsecond).String()
}
