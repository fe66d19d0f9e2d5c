package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseLimitsDefaultSet(t *testing.T) {
	ls, err := parseLimits(defaultDrainLimits)
	require.NoError(t, err)
	require.Len(t, ls, 6)
	l := ls[0] // 50/2s:10
	require.Equal(t, "50/2s:10", l.String())
	require.Equal(t, "50/2s", l.rate())
	require.InDelta(t, 20.5, l.declared(), 1e-9)
	require.Equal(t, 48780488*time.Nanosecond, l.t) // 2s / 41, rounded up
	require.Equal(t, 10+41*4, l.jobs(8*time.Second))
	require.Equal(t, 50+951*8/10+1, ls[5].jobs(8*time.Second)) // 1000/10s:50: 760.8 rounded up
}

func TestParseLimitsRefusesBadItems(t *testing.T) {
	for _, s := range []string{"50/2s", "x/1s:1", "10/1s:11", "10/1s:0", "10/zz:1", "0/1s:1"} {
		_, err := parseLimits(s)
		require.Error(t, err, s)
	}
}

func TestSteadyRateSkipsTheBurst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ts []time.Time
	for i := 0; i < 3; i++ {
		ts = append(ts, t0) // the burst, at once
	}
	for i := 1; i <= 11; i++ {
		ts = append(ts, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	rate, over, ok := steadyRate(ts, 3)
	require.True(t, ok)
	require.Equal(t, 11, over)
	require.InDelta(t, 10.0, rate, 1e-9) // 10 intervals in 1 s
	_, _, ok = steadyRate(ts[:4], 3)
	require.False(t, ok)
}

func TestLightRunCountsJobsThatNeverStarted(t *testing.T) {
	r := lightRun{}
	for i := 0; i < 100; i++ {
		at := int64(i) * int64(20*time.Millisecond)
		r.sent = append(r.sent, at)
		if i < 98 {
			r.samples = append(r.samples, latSample{at: at, d: time.Duration(i+1) * time.Millisecond})
		}
	}
	st := r.stats()
	require.Equal(t, 98, st.n)
	require.Equal(t, 2, st.missing)
	require.Equal(t, 50*time.Millisecond, st.p50)
	require.Equal(t, never, st.p99)
	require.Equal(t, "never", fmtLatency(st.peak))
	first := r.first(time.Second)
	require.Len(t, first.sent, 50)
	require.Equal(t, 0, first.stats().missing)
}

func TestMedian(t *testing.T) {
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	require.Equal(t, []float64{0.5, 2}, ratios([]float64{1, 4}, []float64{2, 2}))
}

func TestScenarioDefaults(t *testing.T) {
	f := benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "loose", floodRate: "10/1s", drainFor: time.Second}
	require.NoError(t, f.check(map[string]bool{}))
	require.Equal(t, "1000/1s", f.rate)
	require.Equal(t, 1000, f.burst)
	require.Equal(t, 100, f.keys)
	require.Equal(t, 5, f.rounds)

	f = benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "drain", drainFor: 8 * time.Second}
	require.NoError(t, f.check(map[string]bool{}))
	require.Equal(t, 1, f.procs)
	require.Equal(t, 34*time.Second, f.drainTimeout)

	f = benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "drain", drainFor: time.Second, deleteDone: true}
	require.Error(t, f.check(map[string]bool{}))
	f = benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "flood", latency: true}
	require.Error(t, f.check(map[string]bool{}))

	f = benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "flood", floodRate: "10/1s", lightRate: "1000/1s"}
	require.NoError(t, f.check(map[string]bool{}))
	f.lightRate = "fast"
	require.ErrorContains(t, f.check(map[string]bool{}), "--light-rate")
	f = benchFlags{jobs: 1, workers: 1, concurrency: 1, keys: 1, scenario: "loose", lightRate: "1000/1s"}
	require.ErrorContains(t, f.check(map[string]bool{}), "--light-rate limits the flood scenario's light load")
}

// The loose scenario measures the check when it defers nothing, so it
// says when a budget gets more jobs than its burst admits at once: 1000/1s
// with burst 1000 then admits one a second.
func TestLooseScenarioSaysWhenJobsGoBeyondTheBursts(t *testing.T) {
	f := benchFlags{jobs: 100_000, workers: 1, concurrency: 1, keys: 1, scenario: "loose"}
	require.NoError(t, f.check(map[string]bool{"jobs": true}))
	require.Empty(t, f.beyondBursts())
	f = benchFlags{jobs: 100_001, workers: 1, concurrency: 1, keys: 1, scenario: "loose"}
	require.NoError(t, f.check(map[string]bool{"jobs": true}))
	require.Contains(t, f.beyondBursts(), "up to 1001 a budget, more than the burst (1000)")
	f = benchFlags{jobs: 400_000, workers: 1, concurrency: 1, keys: 400, scenario: "loose"}
	require.NoError(t, f.check(map[string]bool{"jobs": true, "keys": true}))
	require.Empty(t, f.beyondBursts())
}

func TestKindsConfigArgs(t *testing.T) {
	require.Empty(t, kindsConfig{}.args())
	require.Equal(t, []string{"--rate", "5/1s", "--burst", "2", "--flood-rate", "10/1s", "--light-rate", "100/1s"},
		kindsConfig{rate: "5/1s", burst: 2, floodRate: "10/1s", lightRate: "100/1s"}.args())
}
