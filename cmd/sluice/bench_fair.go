package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/fairshare"
	"github.com/sluicequeue/sluice/jobs"
)

// The fair scenario's noisy neighbour: 20 light keys of 50 jobs each
// arrive while one heavy key's --flood jobs run.
const (
	fairLights    = 20
	fairLightJobs = 50
)

// fairScenario measures fair shares (docs/fairness.md): per round, the
// noisy neighbour with and without fairness, and a burn-down of --jobs
// jobs over --keys fairness keys against the same jobs without fairness;
// then the worst-served key's share in claim rounds, under an adversarial
// skew and under weights 1:2:4, fair and FIFO.
func (b *bench) fairScenario(ctx context.Context) error {
	b.say("bench: fair shares on %s, %s; %d rounds", b.store.Dialect().Name(), b.where(), b.f.rounds)
	var burn [2][]float64 // plain, fair jobs/s
	var first, last [2][]float64
	for r := 1; r <= b.f.rounds; r++ {
		for i, fair := range []bool{false, true} {
			what := map[bool]string{false: "plain", true: "fair"}[fair]
			nn, err := b.noisyNeighbour(ctx, fair)
			if err != nil {
				return err
			}
			b.say("round %d %s noisy neighbour: each light key's first start within %d worker claims, %.1f rounds of starts of its enqueue (max; median %.1f), %s (max); "+
				"their last at %s, the heavy key's last at %s after they began to enqueue (which took %s)",
				r, what, nn.maxClaims, nn.maxRounds, nn.medianRounds, nn.maxWait.Round(time.Millisecond), nn.lightsDone.Round(time.Millisecond),
				nn.heavyDone.Round(time.Millisecond), nn.enqueued.Round(time.Millisecond))
			first[i] = append(first[i], float64(nn.maxClaims))
			last[i] = append(last[i], float64(nn.lightsDone.Milliseconds()))
		}
		// Burn-downs alternate which goes first (A B, B A, …), so that
		// neither always follows the noisy neighbour's runs.
		order := []bool{false, true}
		if r%2 == 0 {
			order = []bool{true, false}
		}
		for _, fair := range order {
			i := map[bool]int{false: 0, true: 1}[fair]
			what := map[bool]string{false: "plain", true: "fair"}[fair]
			if err := b.reset(ctx); err != nil {
				return err
			}
			if err := b.configure(kindsConfig{fair: fair}, false); err != nil {
				return err
			}
			elapsed, err := b.burn(ctx, b.f.jobs, func(i int) jobs.Item { return jobs.Item{Args: benchFair{Key: i % b.f.keys}} }, kFair)
			if err != nil {
				return err
			}
			if _, err := b.checkOnce(ctx, kFair); err != nil {
				return err
			}
			burn[i] = append(burn[i], float64(b.f.jobs)/elapsed.Seconds())
			b.say("round %d %s burn-down of %d jobs over %d keys: %.0f jobs/s", r, what, b.f.jobs, b.f.keys, burn[i][r-1])
		}
	}
	b.say("")
	b.say("noisy neighbour, light keys' first start, max worker claims: plain %s, fair %s", list("%.0f", first[0]), list("%.0f", first[1]))
	b.say("noisy neighbour, light keys' last start, ms after arrival: plain %s, fair %s", list("%.0f", last[0]), list("%.0f", last[1]))
	b.say("burn-down jobs/s: plain %s, fair %s", list("%.0f", burn[0]), list("%.0f", burn[1]))
	b.say("burn-down median: plain %.0f, fair %.0f, ratio %.2f (per round %s)", median(burn[0]), median(burn[1]),
		median(ratios(burn[1], burn[0])), list("%.2f", ratios(burn[1], burn[0])))
	b.say("")
	return b.fairShares(ctx)
}

// noisyRun is what one noisy-neighbour run measured, from the moment the
// light keys began to enqueue.
type noisyRun struct {
	maxRounds, medianRounds float64
	// maxClaims is the most worker claims a light key's first job waited
	// for, the one that took it included.
	maxClaims             int
	maxWait               time.Duration
	lightsDone, heavyDone time.Duration
	// enqueued is how long the 20 enqueues took.
	enqueued time.Duration
}

// noisyNeighbour runs the heavy key's jobs and, once 1000 have started,
// enqueues the light keys' (each key one EnqueueMany). A claim round is
// one start per active key (21): a light key's wait in rounds is the
// starts between its arrival and its first start, over 21.
func (b *bench) noisyNeighbour(ctx context.Context, fair bool) (noisyRun, error) {
	if err := b.reset(ctx); err != nil {
		return noisyRun{}, err
	}
	if err := b.configure(kindsConfig{fair: fair}, false); err != nil {
		return noisyRun{}, err
	}
	var starts []fairStart
	var claims [][2]time.Time
	b.t.fairStarts, b.t.fairClaims = &starts, &claims
	if err := b.insert(ctx, b.f.flood, func(int) jobs.Item { return jobs.Item{Args: benchFair{Key: 0}} }); err != nil {
		return noisyRun{}, err
	}
	if err := b.analyze(ctx); err != nil {
		return noisyRun{}, err
	}
	_, stop, err := b.startWorkers(ctx, b.pub, false)
	if err != nil {
		return noisyRun{}, err
	}
	defer stop()
	if _, err := waitFor(ctx, b.t.ran[kFair].Load, 1000, time.Time{}); err != nil {
		return noisyRun{}, err
	}
	// Each light key's arrival: when its EnqueueMany returned, and how
	// many jobs had started by then.
	arrived := time.Now()
	enqAt, enqIdx := map[int]time.Time{}, map[int]int{}
	for k := 1; k <= fairLights; k++ {
		items := make([]jobs.Item, fairLightJobs)
		for i := range items {
			items[i] = jobs.Item{Args: benchFair{Key: k}}
		}
		if _, err := b.client.EnqueueMany(ctx, items); err != nil {
			return noisyRun{}, err
		}
		b.t.mu.Lock()
		enqAt[k], enqIdx[k] = time.Now(), len(starts)
		b.t.mu.Unlock()
		b.enqueued[kindNames[kFair]] += len(items)
	}
	total := int64(b.f.flood + fairLights*fairLightJobs)
	if _, err := waitFor(ctx, b.t.ran[kFair].Load, total, time.Time{}); err != nil {
		return noisyRun{}, err
	}
	stop()
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	var run noisyRun
	var rounds []float64
	seen := map[int]bool{}
	for i, s := range starts {
		if s.key == 0 {
			run.heavyDone = s.at.Sub(arrived)
			continue
		}
		if !seen[s.key] {
			seen[s.key] = true
			rounds = append(rounds, float64(max(i-enqIdx[s.key], 0))/float64(fairLights+1))
			run.maxWait = max(run.maxWait, s.at.Sub(enqAt[s.key]))
			// The claims that began after the key's jobs were in and
			// ended by its first start: the one that took it, and any
			// that passed it over.
			n := 0
			for _, c := range claims {
				if c[0].After(enqAt[s.key]) && !c[1].After(s.at) {
					n++
				}
			}
			run.maxClaims = max(run.maxClaims, n)
		}
		run.lightsDone = max(run.lightsDone, s.at.Sub(arrived))
	}
	run.enqueued = enqAt[fairLights].Sub(arrived)
	if len(rounds) != fairLights || len(starts) != int(total) {
		return noisyRun{}, fmt.Errorf("noisy neighbour: %d light keys started, want %d", len(rounds), fairLights)
	}
	run.maxRounds, run.medianRounds = slices.Max(rounds), median(rounds)
	return run, nil
}

// fairShares claims in rounds through the engine (no handler runs; a
// claim is a round) and reports the worst-served key's claims over its
// weighted fair share while at least two keys had work: under an
// adversarial skew (a flood of --flood/2 jobs, a key that enqueues 500 at a
// time every 200 rounds and one that keeps a single job ready; claims of
// 10) and under weights 1:2:4 (claims of 70), FIFO and fair.
func (b *bench) fairShares(ctx context.Context) error {
	type setup struct {
		name   string
		rounds int
		size   int
		step   func(enq func(key string, w, n int) error, m *fairshare.Meter, round int) error
	}
	flood := max(b.f.flood/2, 1)
	setups := []setup{
		{"adversarial skew", 1500, 10, func(enq func(string, int, int) error, m *fairshare.Meter, round int) error {
			if round == 0 {
				if err := enq("flood", 1, flood); err != nil {
					return err
				}
			}
			if round%200 == 0 {
				if err := enq("burst", 1, 500); err != nil {
					return err
				}
			}
			if m.Backlog("trickle") == 0 {
				return enq("trickle", 1, 1)
			}
			return nil
		}},
		{"weights 1:2:4", 100, 70, func(enq func(string, int, int) error, _ *fairshare.Meter, round int) error {
			if round > 0 {
				return nil
			}
			for _, w := range []int{1, 2, 4} {
				if err := enq(fmt.Sprintf("w%d", w), w, 7000); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, st := range setups {
		for _, fair := range []bool{false, true} {
			if err := b.reset(ctx); err != nil {
				return err
			}
			m, took, err := b.shareRun(ctx, fair, st.rounds, st.size, st.step)
			if err != nil {
				return err
			}
			worst := m.Worst()
			what := map[bool]string{false: "FIFO", true: "fair"}[fair]
			b.say("%s, %s: worst-served key %s got %.0f of its fair share %.1f: %.2f (claims took %s per round)",
				st.name, what, worst.Key, worst.Got, worst.Fair, worst.Ratio(), took.Round(time.Microsecond))
		}
	}
	return b.reset(ctx)
}

// shareRun runs one share measurement and returns its meter and the
// median time a claim took.
func (b *bench) shareRun(ctx context.Context, fair bool, rounds, size int,
	step func(enq func(key string, w, n int) error, m *fairshare.Meter, round int) error) (*fairshare.Meter, time.Duration, error) {
	s := b.store
	pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "bench-fair-shares"}, engine.At(time.Now()))
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = s.DeregisterProcess(context.WithoutCancel(ctx), pid) }()
	m := fairshare.New()
	keyOf := map[int64]string{}
	enq := func(key string, w, n int) error {
		batch := make([]engine.NewJob, n)
		for i := range batch {
			batch[i] = engine.NewJob{Kind: kindNames[kFair], Queue: benchQueue, Args: []byte(`{}`), MaxAttempts: 1}
			if fair {
				batch[i].FairKey, batch[i].FairWeight = key, w
			}
		}
		res, err := s.Enqueue(ctx, nil, engine.At(time.Now()), batch)
		if err != nil {
			return err
		}
		for _, r := range res {
			keyOf[r.ID] = key
		}
		m.Add(key, w, n)
		return nil
	}
	var took []float64
	for round := 0; round < rounds; round++ {
		if err := step(enq, m, round); err != nil {
			return nil, 0, err
		}
		began := time.Now()
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{benchQueue}, Max: size, Clock: engine.At(time.Now()), Fair: fair})
		if err != nil {
			return nil, 0, err
		}
		took = append(took, float64(time.Since(began)))
		keys := make([]string, len(res.Jobs))
		for i, j := range res.Jobs {
			keys[i] = keyOf[j.ID]
		}
		m.Round(keys)
	}
	return m, time.Duration(median(took)), nil
}
