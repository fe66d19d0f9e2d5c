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
