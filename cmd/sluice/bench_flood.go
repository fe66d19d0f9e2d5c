package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/jobs"
)

// floodScenario measures unlimited jobs sharing a queue with a throttled
// flood: a burn-down of --jobs unlimited jobs enqueued behind --flood
// limited ones, and a light load's latency with the flood enqueued just
// before the workers start, each against the same run without the flood,
// in --rounds interleaved pairs. Both runs of a pair declare the flood's
// kind (so the workers claim through the limited path in both) and run a
// dispatcher: they differ only by the flood's jobs.
func (b *bench) floodScenario(ctx context.Context) error {
	b.say("bench: %d unlimited jobs behind a flood of %d jobs limited to %s (burst 1, one budget), one queue, on %s, %s, %s; %d rounds, each without then with the flood",
		b.f.jobs, b.f.flood, b.f.floodRate, b.store.Dialect().Name(), b.where(), b.dispatcherSays(), b.f.rounds)
	var burn [2][]float64 // jobs/s without, with the flood
	var lat [2][]lightRun
	for r := 1; r <= b.f.rounds; r++ {
		for i, flood := range []bool{false, true} {
			jps, err := b.floodBurn(ctx, r, flood)
			if err != nil {
				return err
			}
			burn[i] = append(burn[i], jps)
		}
		for i, flood := range []bool{false, true} {
			run, err := b.floodLatency(ctx, r, flood)
			if err != nil {
				return err
			}
			lat[i] = append(lat[i], run)
		}
	}
	b.say("")
	b.say("burn-down, unlimited jobs/s per round: without the flood %s; with it %s; ratio %s",
		list("%.0f", burn[0]), list("%.0f", burn[1]), list("%.2f", ratios(burn[1], burn[0])))
	var st, first [2]latStats
	for i, what := range []string{"without the flood", "with the flood"} {
		all := pool(lat[i])
		st[i] = all.stats()
		var firsts []lightRun
		for _, run := range lat[i] {
			firsts = append(firsts, run.first(time.Second))
		}
		first[i] = pool(firsts).stats()
		b.say("latency %s, %d rounds pooled: %s", what, len(lat[i]), st[i])
		b.say("  over the first second of each load: %s", first[i])
	}
	no, with := median(burn[0]), median(burn[1])
	b.say("unlimited jobs/s without flood: %.0f", no)
	b.say("unlimited jobs/s with flood: %.0f", with)
	b.say("unlimited jobs/s ratio: %.2f", with/no)
	for i, what := range []string{"without flood", "with flood"} {
		b.say("latency p50 %s: %s", what, fmtLatency(st[i].p50))
		b.say("latency p90 %s: %s", what, fmtLatency(st[i].p90))
		b.say("latency p99 %s: %s", what, fmtLatency(st[i].p99))
		b.say("latency max %s: %s", what, fmtLatency(st[i].peak))
		b.say("latency first-second p99 %s: %s", what, fmtLatency(first[i].p99))
	}
	b.say("latency p99 ratio: %s", latRatio(st[1].p99, st[0].p99))
	b.say("latency first-second p99 ratio: %s", latRatio(first[1].p99, first[0].p99))
	return nil
}

func latRatio(a, b time.Duration) string {
	if a == never || b == never || b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// floodRun empties the queue and declares the scenario's kinds; with
// flood it enqueues the flood's jobs, ready.
func (b *bench) floodRun(ctx context.Context, flood bool) error {
	if err := b.reset(ctx); err != nil {
		return err
	}
	if err := b.configure(kindsConfig{floodRate: b.f.floodRate, lightRate: b.f.lightRate}, true); err != nil {
		return err
	}
	if !flood {
		return nil
	}
	began := time.Now()
	if err := b.insert(ctx, b.f.flood, func(int) jobs.Item { return jobs.Item{Args: benchFlood{}} }); err != nil {
		return err
	}
	b.say("enqueued the flood, %d jobs, in %s", b.f.flood, time.Since(began).Round(time.Millisecond))
	return nil
}

// lightKind says what the light load's jobs are.
func (b *bench) lightKind() string {
	if b.f.lightRate == "" {
		return "unlimited"
	}
	to, _, _ := parseRate(b.f.lightRate) // checked with the flags
	return fmt.Sprintf("rate-limited (%s, burst %d, %d budgets of their own)", b.f.lightRate, to, lightBudgets)
}

func withOrWithout(flood bool) string {
	if flood {
		return "with the flood"
	}
	return "without the flood"
}

// floodBurn times a burn-down of the unlimited jobs, behind the flood or
// not, and returns their jobs/s.
func (b *bench) floodBurn(ctx context.Context, round int, flood bool) (float64, error) {
	b.say("")
	b.say("round %d: burn-down of %d unlimited jobs %s", round, b.f.jobs, withOrWithout(flood))
	if err := b.floodRun(ctx, flood); err != nil {
		return 0, err
	}
	elapsed, err := b.burn(ctx, b.f.jobs, func(int) jobs.Item { return jobs.Item{Args: benchNoop{}} }, kNoop)
	if err != nil {
		return 0, err
	}
	jps := float64(b.f.jobs) / elapsed.Seconds()
	b.say("worked the %d unlimited jobs in %s: %.0f jobs/s", b.f.jobs, elapsed.Round(time.Millisecond), jps)
	if flood {
		b.floodStats()
	}
	if _, err := b.checkOnce(ctx, kNoop); err != nil {
		return 0, err
	}
	return jps, nil
}

// floodLatency runs the light load on workers started just before it,
// with the flood enqueued and not yet touched, or without the flood.
func (b *bench) floodLatency(ctx context.Context, round int, flood bool) (lightRun, error) {
	b.say("")
	b.say("round %d: latency of one %s job every %s for %s %s", round, b.lightKind(), lightEvery, lightJobs*lightEvery, withOrWithout(flood))
	if err := b.floodRun(ctx, flood); err != nil {
		return lightRun{}, err
	}
	if err := b.analyze(ctx); err != nil {
		return lightRun{}, err
	}
	ws := b.pub
	if b.f.procs == 0 {
		var err error
		if ws, err = b.open(ctx); err != nil {
			return lightRun{}, err
		}
		defer ws.Close()
	}
	_, stop, err := b.startWorkers(ctx, ws, true)
	if err != nil {
		return lightRun{}, err
	}
	sent, err := b.lightLoad(ctx)
	stop()
	if err != nil {
		return lightRun{}, err
	}
	run := lightRun{sent: sent, samples: b.t.latencies()}
	b.say("%s", run.stats())
	b.say("  first second: %s", run.first(time.Second).stats())
	if flood {
		b.floodStats()
	}
	if _, err := b.checkOnce(ctx, kStamp); err != nil {
		return lightRun{}, err
	}
	return run, nil
}

// floodStats prints what the workers did with the flood's jobs, as their
// hooks reported it.
func (b *bench) floodStats() {
	admitted, deferred, parked := b.t.ran[kFlood].Load(), b.t.deferred[kFlood].Load(), b.t.parked[kFlood].Load()
	moves := "n/a"
	if admitted > 0 {
		moves = fmt.Sprintf("%.1f", float64(admitted+deferred)/float64(admitted))
	}
	b.say("flood: %d admitted; deferred %d times: %d to scheduled, %d parked; row moves by workers (deferrals and admissions) per flood job admitted: %s, per flood job enqueued: %.2f (the dispatcher's promotions and unparkings not counted)",
		admitted, deferred, deferred-parked, parked, moves, float64(admitted+deferred)/float64(max(1, b.enqueued[kindNames[kFlood]])))
}
