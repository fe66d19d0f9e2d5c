package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// While a sweep moves a flood, claims take the queue's limited jobs more
// urgent than it and after it (less urgent, or queued after its last job),
// in claim order and within their window, and leave to the sweep the
// flood, whatever is queued among its jobs or before them at their
// priority, and jobs like the flood's outside it; of a queue whose span is
// not known they take no limited job.
func TestClaimsTakeTheLimitedJobsAroundASweptFlood(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		prio := func(j engine.NewJob, p int) engine.NewJob { j.Priority = p; return j }
		var jobs []engine.NewJob
		jobs = append(jobs, limited("k", "k/before"))
		for range 5 {
			jobs = append(jobs, limited("k", "k/flood"))
		}
		jobs = append(jobs, limited("k", "k/among"))
		for range 5 {
			jobs = append(jobs, limited("k", "k/flood"))
		}
		jobs = append(jobs, limited("k", "k/after"), prio(limited("k", "k/urgent"), -1), prio(limited("k", "k/later"), 1), job("free", "default", 0))
		id := enqueue(t, s, t0, jobs...)
		before, among, after, urgent, later, free := id[0], id[6], id[12], id[13], id[14], id[15]
		flood := append(append([]int64{}, id[1:6]...), id[7:12]...)

		o := engine.Overflow{Queue: "default", Kind: "k", RateKeys: engine.EncodeRateKeys([]engine.RateKey{{Key: "k/flood", Cost: 1}}), Key: "k/flood"}
		span, ok, err := s.OverflowSpan(ctx, o)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, engine.Span{First: engine.Place{ID: flood[0]}, Last: engine.Place{ID: flood[9]}, Kind: "k", RateKeys: o.RateKeys}, span)
		// A job of the flood that comes after the span was read.
		stray := enqueue(t, s, t0, limited("k", "k/flood"))[0]

		pid := register(t, s, t0)
		claim := func(window int, swept map[string]*engine.Span) *engine.ClaimResult {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Candidates: window,
				Clock: engine.At(t0), Limits: lim, Horizon: time.Hour, Swept: swept})
			require.NoError(t, err)
			return res
		}
		res := claim(2, map[string]*engine.Span{"default": nil})
		require.Equal(t, []int64{free}, ids(res.Jobs), "no limited job while the span is not known")
		require.Empty(t, res.Deferred)

		res = claim(2, map[string]*engine.Span{"default": &span})
		require.Equal(t, []int64{urgent, after}, ids(res.Jobs), "the first two in claim order")
		require.True(t, res.MoreLimited)
		res = claim(10, map[string]*engine.Span{"default": &span})
		require.Equal(t, []int64{later}, ids(res.Jobs))
		require.Empty(t, res.Deferred, "the flood is left to the sweep")
		for _, j := range append(flood, before, among, stray) {
			require.Equal(t, engine.StateReady, state(t, s, j).State)
		}

		res = claim(20, nil)
		require.Equal(t, []int64{before, flood[0], among}, ids(res.Jobs), "once the sweep is over, claims meet the flood again")
		require.Len(t, res.Deferred, 10)
	})
}

// A claim that goes around a flood a sweep is moving runs on generic plans
// where the database has the switch (PostgreSQL): it sends it first, for
// its transaction alone, so that the connection goes back to its pool as
// it came; a claim with no sweep beside it sends nothing more, and takes
// the same jobs either way.
func TestAClaimAroundASweepRunsOnGenericPlansForItsTransactionAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		rs, rec := testdb.Record(s)
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		id := enqueue(t, s, t0, limited("k", "k/flood"), limited("k", "k/flood"), limited("k", "k/other"), job("free", "default", 0))
		o := engine.Overflow{Queue: "default", Kind: "k", RateKeys: engine.EncodeRateKeys([]engine.RateKey{{Key: "k/flood", Cost: 1}}), Key: "k/flood"}
		span, ok, err := s.OverflowSpan(ctx, o)
		require.NoError(t, err)
		require.True(t, ok)
		pid := register(t, s, t0)
		generic := s.SQL().GenericPlans()
		if s.Dialect().Name() == "postgres" {
			require.Contains(t, generic, "SET LOCAL plan_cache_mode")
		} else {
			require.Empty(t, generic, "only PostgreSQL has the switch")
		}

		rec.Take()
		res, err := rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10,
			Clock: engine.At(t0), Limits: lim, Horizon: time.Hour, Swept: map[string]*engine.Span{"default": &span}})
		require.NoError(t, err)
		require.ElementsMatch(t, []int64{id[2], id[3]}, ids(res.Jobs), "the other budget's job and the free one; the flood is the sweep's")
		sent := rec.Take()
		if generic != "" {
			require.Equal(t, 0, slices.Index(sent, generic), "the claim's first statement: %q", sent)
			rows, err := s.DB().Query(ctx, "SELECT current_setting('plan_cache_mode')")
			require.NoError(t, err)
			var mode string
			require.True(t, rows.Next())
			require.NoError(t, rows.Scan(&mode))
			rows.Close()
			require.Equal(t, "auto", mode, "the connection went back to its pool as it came")
		}
		require.NotContains(t, sent, "", "no empty statement where the database has no switch")

		enqueue(t, s, t0, job("free", "default", 0))
		res, err = rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10,
			Clock: engine.At(t0), Limits: lim, Horizon: time.Hour})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 2, "the free job and the flood's first, once no sweep runs")
		if generic != "" {
			require.NotContains(t, rec.Take(), generic, "a claim with no sweep beside it sends nothing more")
		}
	})
}

// TestClaimsBesideAConcurrentSweepHoldTheBoundsAndLoseNothing runs the
// sweep and the claims beside it at once, each on its own connection pool:
// a flood on one tight budget, swept in batches as a worker sweeps it,
// while three claimers, told its span, take the limited jobs of other
// budgets more urgent than the flood, queued after it at its priority and
// less urgent, and jobs like the flood's keep arriving after the span was
// read. Claims beside the sweep never take or defer a job like the flood's;
// they do take the others while it runs; no budget admits more than its
// limit in any window, by the times the claims decided at; and once the
// sweep is over every job runs, once.
func TestClaimsBesideAConcurrentSweepHoldTheBoundsAndLoseNothing(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) { claimsBesideASweep(t, b) })
	}
}

func claimsBesideASweep(t *testing.T, b testdb.Backend) {
	ctx := context.Background()
	const (
		per      = 100 * time.Millisecond
		floodTo  = 20 // burst 10: T = 100 ms / 11
		lightTo  = 10
		flooded  = 300
		strays   = 30
		lights   = 4 // budgets
		perLight = 12
		batch    = 25
		horizon  = 400 * time.Millisecond
	)
	lim := limits{"f": spec(t, "f", floodTo, per, floodTo/2), "l": spec(t, "l", lightTo, per, lightTo/2)}
	// The clock stands still while the flood is swept, so that its budget
	// stays behind and every batch has work, and moves on once the sweep
	// is over, for the rest to drain.
	fc := clock.NewFake(t0)
	clk := engine.HostTime(fc.Now)
	var over atomic.Bool
	open := testdb.Opener(t, b.URL(t))
	s := open()
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	if b.Name == "sqlite" {
		// One writer at a time whatever the pools: those of one store
		// queue in Go, not in SQLite's busy handler (many times faster).
		open = func() *engine.Store { return s }
	}
	light := func(i, prio int) engine.NewJob {
		j := limited("light", fmt.Sprintf("l/%d", i%lights))
		j.Priority = prio
		return j
	}
	var flood []engine.NewJob
	for range flooded {
		flood = append(flood, limited("flood", "f/x"))
	}
	enqueue(t, s, fc.Now(), flood...)

	// A claim meets the flood first, as a worker's would, and names the
	// overflow the sweep then moves.
	pid := register(t, s, fc.Now())
	first, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: floodTo, Candidates: floodTo,
		Clock: clk, Limits: lim, Horizon: horizon})
	require.NoError(t, err)
	require.Len(t, first.Overflows, 1, "the claim deferred the flood's jobs beyond its burst")
	o := first.Overflows[0]
	require.Equal(t, "f/x", o.Key)

	var others []engine.NewJob
	for i := range lights * perLight {
		// A third more urgent than the flood, a third after it at its
		// priority, a third less urgent: the three ranges a claim reads.
		others = append(others, light(i, i%3-1))
		if i%2 == 0 {
			others = append(others, job("plain", "default", 0))
		}
	}
	enqueue(t, s, fc.Now(), others...)
	all := flooded + len(others) + strays

	var (
		mu       sync.Mutex
		admitted = map[string][]time.Time{}
		ran      = map[int64]int{}
		beside   int // light jobs admitted by claims beside the sweep
		moved    int // jobs the sweep deferred
	)
	record := func(res *engine.ClaimResult) {
		for _, j := range res.Jobs {
			ran[j.ID]++
			for _, rk := range j.RateKeys {
				admitted[rk.Key] = append(admitted[rk.Key], res.DecidedAt)
			}
		}
	}
	record(first)

	// swept is what the claimers pass as ClaimParams.Swept: the queue with
	// no span while the sweep reads it, then its span, then nothing.
	var swept atomic.Pointer[map[string]*engine.Span]
	swept.Store(&map[string]*engine.Span{"default": nil})
	claimedBeside := make(chan struct{}, 3)
	deadline := time.Now().Add(40 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	// The sweep, as a worker runs it, on a store opened here: a failure to
	// open ends the test, which only the test's own goroutine may do.
	ss := open()
	go func() {
		defer wg.Done()
		span, ok, err := ss.OverflowSpan(ctx, o)
		if assertNoErr(t, err) && assert.True(t, ok, "the flood is ready") {
			swept.Store(&map[string]*engine.Span{"default": &span})
			// Jobs like the flood's that arrive once the span is read.
			_, err = ss.Enqueue(ctx, nil, clk, slices.Repeat([]engine.NewJob{limited("flood", "f/x")}, strays))
			ok = assertNoErr(t, err)
		}
		if !ok {
			swept.Store(nil)
			over.Store(true)
			return
		}
		for time.Now().Before(deadline) {
			swept, _, err := ss.DeferOverflow(ctx, clk, o, horizon, batch)
			n := len(swept)
			mu.Lock()
			moved += n
			mu.Unlock()
			if !assertNoErr(t, err) || n < batch {
				break
			}
			// The worker rests between batches; here, until three
			// claims beside the sweep have run.
			for range 3 {
				select {
				case <-claimedBeside:
				case <-time.After(time.Until(deadline)):
				}
			}
		}
		swept.Store(nil)
		over.Store(true)
	}()
	for range 3 {
		cs := open()
		cpid := register(t, cs, fc.Now())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(ran) >= all
				mu.Unlock()
				if done {
					return
				}
				if over.Load() {
					fc.Advance(10 * time.Millisecond)
				}
				if _, _, err := cs.Promote(ctx, clk, 100); !assertNoErr(t, err) {
					return
				}
				if _, err := cs.Unpark(ctx, clk, horizon, 10, 0); !assertNoErr(t, err) {
					return
				}
				sw := swept.Load()
				p := engine.ClaimParams{ProcessID: cpid, Queues: []string{"default"}, Max: 4, Candidates: 4,
					Clock: clk, Limits: lim, Horizon: horizon}
				if sw != nil {
					p.Swept = *sw
				}
				res, err := cs.Claim(ctx, p)
				if !assertNoErr(t, err) {
					return
				}
				mu.Lock()
				record(res)
				mu.Unlock()
				if sw == nil || (*sw)["default"] == nil {
					continue
				}
				for _, j := range res.Jobs {
					assert.NotEqual(t, "flood", j.Kind, "job %d like the flood's admitted beside its sweep", j.ID)
					if j.Kind == "light" {
						mu.Lock()
						beside++
						mu.Unlock()
					}
				}
				for _, d := range res.Deferred {
					assert.NotEqual(t, "flood", d.Kind, "job %d like the flood's deferred beside its sweep", d.JobID)
				}
				select {
				case claimedBeside <- struct{}{}:
				default:
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, ran, all, "every job ran")
	for id, n := range ran {
		require.Equal(t, 1, n, "job %d ran once", id)
	}
	t.Logf("the sweep moved %d jobs; claims beside it admitted %d light jobs", moved, beside)
	// A batch that comes up short ends a sweep, as it ends a worker's: on
	// MySQL one CI run's third batch found only 5 of the flood's rows
	// unlocked (55 moved). What is left is met by the claims after it.
	require.GreaterOrEqual(t, moved, batch, "a sweep ran beside the claims")
	require.Positive(t, beside, "claims took limited jobs of other budgets while the flood was swept")
	require.LessOrEqual(t, ratelimit.BusiestWindow(admitted["f/x"], per), floodTo)
	for i := range lights {
		require.LessOrEqual(t, ratelimit.BusiestWindow(admitted[fmt.Sprintf("l/%d", i)], per), lightTo)
	}
}
