package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/fairshare"
	"github.com/sluicequeue/sluice/internal/testdb"
)

func fairJob(key string, weight int) engine.NewJob {
	j := job("f", "default", 0)
	j.FairKey, j.FairWeight = key, weight
	return j
}

// fairRig enqueues fair jobs and claims them, recording which key each
// claimed job belongs to in a fairshare.Meter.
type fairRig struct {
	t     *testing.T
	s     *engine.Store
	pid   int64
	now   time.Time
	lim   engine.Limits
	keyOf map[int64]string
	meter *fairshare.Meter
}

func newFairRig(t *testing.T, s *engine.Store) *fairRig {
	return &fairRig{t: t, s: s, pid: register(t, s, t0), now: t0, keyOf: map[int64]string{}, meter: fairshare.New()}
}

// add enqueues n jobs of key in one EnqueueMany.
func (r *fairRig) add(key string, weight, n int, mod func(*engine.NewJob)) []int64 {
	r.t.Helper()
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = fairJob(key, weight)
		if mod != nil {
			mod(&jobs[i])
		}
	}
	got := enqueue(r.t, r.s, r.now, jobs...)
	for _, id := range got {
		r.keyOf[id] = key
	}
	r.meter.Add(key, weight, n)
	return got
}

// claim takes up to max jobs and returns their keys in claim order.
func (r *fairRig) claim(max int) []string {
	r.t.Helper()
	res, err := r.s.Claim(context.Background(), engine.ClaimParams{
		ProcessID: r.pid, Queues: []string{"default"}, Max: max, Clock: engine.At(r.now), Limits: r.lim, Fair: true, PromoteDue: r.lim != nil,
	})
	require.NoError(r.t, err)
	keys := make([]string, len(res.Jobs))
	for i, j := range res.Jobs {
		keys[i] = r.keyOf[j.ID]
	}
	r.meter.Round(keys)
	return keys
}

func TestFairNoisyNeighbourLightKeysStartWithinTwoRounds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		const heavy, lights, each = 3000, 20, 50
		r.add("heavy", 1, heavy, nil)
		// The heavy key alone gets the whole queue (work-conserving).
		for range 5 {
			require.Equal(t, strings.Repeat("heavy ", 21), strings.Repeat("heavy ", len(r.claim(21))))
		}
		for i := range lights {
			r.add(fmt.Sprintf("light%02d", i), 1, each, nil)
		}
		// A round is a claim of one job per active key.
		for r.meter.Backlog("heavy") > 0 {
			require.NotEmpty(t, r.claim(lights+1))
		}
		var lastLight int
		for _, sh := range r.meter.Shares() {
			if sh.Key == "heavy" {
				continue
			}
			require.LessOrEqual(t, sh.First-5, 2, "%s's first job waited %d rounds", sh.Key, sh.First-5)
			lastLight = max(lastLight, sh.Last)
		}
		heavyLast := r.meter.Shares()[0].Last
		t.Logf("light keys' last job in round %d; the heavy backlog's last in round %d", lastLight, heavyLast)
		require.Less(t, lastLight, heavyLast/2, "the light keys finish well before the heavy backlog")
		require.GreaterOrEqual(t, r.meter.Worst().Ratio(), 0.95)
	})
}

func TestFairSharesByWeight(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.add("w1", 1, 400, nil)
		r.add("w2", 2, 400, nil)
		r.add("w4", 4, 400, nil)
		for range 80 {
			r.claim(7)
		}
		for _, sh := range r.meter.Shares() {
			t.Logf("%s got %.0f of %.1f", sh.Key, sh.Got, sh.Fair)
		}
		require.GreaterOrEqual(t, r.meter.Worst().Ratio(), 0.95)
		// Keys with a backlog get exactly their weights' claims.
		sh := r.meter.Shares()
		require.Equal(t, []float64{80, 160, 320}, []float64{sh[0].Got, sh[1].Got, sh[2].Got})
	})
}

func TestFairSharesUnderAdversarialSkew(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.now = at(time.Hour)
		// One key floods ahead; others arrive in bursts between claims,
		// one of them a job at a time, just enough to stay active.
		r.add("flood", 1, 2000, nil)
		for round := range 150 {
			if round%25 == 0 {
				r.add("burst", 1, 60, nil)
			}
			if r.meter.Backlog("trickle") == 0 {
				r.add("trickle", 1, 1, nil)
			}
			r.claim(4)
		}
		for _, sh := range r.meter.Shares() {
			t.Logf("%s got %.0f of %.1f", sh.Key, sh.Got, sh.Fair)
		}
		require.GreaterOrEqual(t, r.meter.Worst().Ratio(), 0.95)
	})
}

func TestFairJobDeferredByARateLimitKeepsItsTurn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.lim = limits{"api": spec(t, "api", 1, time.Second, 1)}
		limitedA := func(j *engine.NewJob) { j.RateKeys = []engine.RateKey{{Key: "api/a", Cost: 1}} }
		a := r.add("a", 1, 3, limitedA)
		r.add("b", 1, 3, nil)
		// a's first is admitted; its second is deferred, and does not count
		// as a turn: b gets its jobs meanwhile.
		require.Equal(t, []string{"a", "b"}, r.claim(2))
		require.Equal(t, []string{"b", "b"}, r.claim(2))
		require.Equal(t, engine.StateScheduled, state(t, s, a[1]).State)
		// A flood of b arrives while a waits; when a's slot comes, its job
		// comes back at the front, with the start it was enqueued with.
		r.add("b", 1, 50, nil)
		r.now = at(time.Second)
		require.Equal(t, []string{"a", "b"}, r.claim(2))
		require.Equal(t, engine.StateRunning, state(t, s, a[1]).State)
	})
}

func TestFairIdleKeyStartsAtTheQueuesVirtualTime(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		// a runs 100 jobs alone, then b floods.
		r.add("a", 1, 100, nil)
		for r.meter.Backlog("a") > 0 {
			r.claim(50)
		}
		r.add("b", 1, 300, nil)
		for range 4 {
			r.claim(50)
		}
		// a was idle while b ran 200: it does not get 200 turns back, nor
		// wait behind its old finish; it starts at the queue's virtual time.
		r.add("a", 1, 10, nil)
		require.ElementsMatch(t, []string{"a", "b", "a", "b"}, r.claim(4))

		// Once every job of a is claimed and the queue has moved past it,
		// its row goes, and its next job starts the same.
		for r.meter.Backlog("a") > 0 {
			r.claim(10)
		}
		r.claim(50)
		n, err := s.PruneFairKeys(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "a's row is pruned; b's, ahead of the queue, stays")
		r.add("a", 1, 2, nil)
		require.ElementsMatch(t, []string{"a", "b", "a", "b"}, r.claim(4))
	})
}

func TestFairCombinesWithConcurrencyAndCoalescing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.add("b", 1, 20, nil)
		conc := func(j *engine.NewJob) { j.Conc = &engine.Conc{Key: "c/a", To: 1, Duration: time.Minute} }
		a := r.add("a", 1, 2, conc)
		require.Equal(t, engine.StateBlocked, state(t, s, a[1]).State)
		co := r.add("a", 1, 1, func(j *engine.NewJob) {
			j.Coalesce = &engine.Coalesce{Key: "co/a"}
		})
		// Starts: b 0, 1, 2, …; a 0, its blocked job 1 (kept for when the
		// slot comes back), its coalescing job 2; ties go by id.
		require.Equal(t, []string{"b", "a", "b", "b", "a"}, r.claim(5))
		require.Equal(t, engine.StateRunning, state(t, s, co[0]).State)
	})
}

func TestClaimWithoutFairRunsNoFairStatement(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		rs, rec := testdb.Record(s)
		pid := register(t, s, t0)
		enqueue(t, s, t0, job("a", "default", 0), fairJob("k", 1))
		res := claim(t, rs, pid, t0, 10)
		require.Len(t, res.Jobs, 1, "a claim without Fair takes no fair job")
		plain := rec.Take()
		require.Len(t, plain, 2, "lock the candidates, mark them running: %q", plain)
		for _, q := range plain {
			require.NotContains(t, q, "fair_start")
			require.NotContains(t, q, "sluice_fair_keys")
		}
		res, err := rs.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Clock: engine.At(t0), Fair: true})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1, "with Fair, the fair job")
		fair := rec.Take()
		require.Len(t, fair, 3, "%q", fair)
		require.Contains(t, fair[1], "fair_start", "the fair stream rides with the plain one")
	})
}

func TestFairRefusesBadKeysAndWeights(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, c := range []struct {
			j    engine.NewJob
			want string
		}{
			{fairJob("k", engine.MaxFairWeight+1), "fairness weight 1048577 for key \"k\" is out of range"},
			{fairJob("k", -1), "fairness weight -1"},
			{fairJob("bad\x00key", 1), "fairness key"},
			{fairJob("", 2), "fairness weight 2 without a fairness key"},
		} {
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("a", "default", 0), c.j})
			require.ErrorContains(t, err, "job 1")
			require.ErrorContains(t, err, c.want)
		}
		stats, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats, "nothing was written")
	})
}
