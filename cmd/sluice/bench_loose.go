package main

import (
	"context"
	"slices"
	"time"
)

// looseScenario alternates burn-downs of --jobs unlimited jobs with
// burn-downs of as many jobs under a loose limit (--rate, --burst over
// --keys budgets; by default 1000/1s, burst 1000, 100 budgets, whose
// bursts admit the 100,000 jobs at once: it says so where a budget's jobs
// would not fit in its burst), so that what is left between them is the
// cost of the claim-time check, which defers nothing. Both run
// the same jobs, bench_limited with its budget key in the args; the
// unlimited runs declare no limit on it (their claims run the plain
// statements). Both run a dispatcher.
func (b *bench) looseScenario(ctx context.Context) error {
	b.say("bench: %d rounds of %d unlimited jobs, then %d under a limit of %s, burst %d, over %d budgets, on %s, %s, %s",
		b.f.rounds, b.f.jobs, b.f.jobs, b.f.rate, b.f.burst, b.f.keys, b.store.Dialect().Name(), b.where(), b.dispatcherSays())
	if note := b.f.beyondBursts(); note != "" {
		b.say("%s", note)
	}
	var jps [2][]float64 // unlimited, limited
	for r := 1; r <= b.f.rounds; r++ {
		for i, limited := range []bool{false, true} {
			kc, what := kindsConfig{}, "unlimited"
			if limited {
				kc, what = kindsConfig{rate: b.f.rate, burst: b.f.burst}, "limited"
			}
			b.say("")
			b.say("round %d: %d %s jobs", r, b.f.jobs, what)
			if err := b.reset(ctx); err != nil {
				return err
			}
			if err := b.configure(kc, true); err != nil {
				return err
			}
			k := kLimited
			elapsed, err := b.burn(ctx, b.f.jobs, b.keyed, k)
			if err != nil {
				return err
			}
			if err := b.rateReport(ctx, elapsed, int64(b.f.jobs)); err != nil {
				return err
			}
			if _, err := b.checkOnce(ctx, k); err != nil {
				return err
			}
			jps[i] = append(jps[i], float64(b.f.jobs)/elapsed.Seconds())
			b.say("round %d %s jobs/s: %.0f (%s)", r, what, jps[i][r-1], elapsed.Round(time.Millisecond))
			if limited {
				b.say("round %d ratio: %.2f", r, jps[1][r-1]/jps[0][r-1])
			}
		}
	}
	rs := ratios(jps[1], jps[0])
	b.say("")
	b.say("unlimited jobs/s per round: %s", list("%.0f", jps[0]))
	b.say("limited jobs/s per round: %s", list("%.0f", jps[1]))
	b.say("ratio per round: %s", list("%.2f", rs))
	b.say("unlimited jobs/s median: %.0f", median(jps[0]))
	b.say("limited jobs/s median: %.0f", median(jps[1]))
	b.say("loose ratio median: %.2f", median(rs))
	b.say("loose ratio worst: %.2f", slices.Min(rs))
	return nil
}
