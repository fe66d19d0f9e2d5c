package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// guarantees.md, "Nothing lost": once the worker is stopping, a batch is
// tried ten times (about 40 s), then left to the reaper. Each try used to
// wait for the database up to 30 s, so a database that does not answer
// at all (a host gone, its connections hanging) held a stopping worker,
// or a stopped Drain, ten times 30 s: now the tries share stoppingTries.
func TestAStoppingRecorderGivesUpWithinItsBoundWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	rec, _ := newRecorder(t, &refusingStore{})
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	rec.wall = func() time.Time { return now }
	rec.sleep = func(d time.Duration) { now = now.Add(d) }
	rec.stopping = func() bool { return true }
	var waits []time.Duration
	rec.finish = func(ctx context.Context, _ int64, _ engine.Clock, _ engine.Outcomes) ([]int64, error) {
		deadline, ok := ctx.Deadline()
		require.True(t, ok, "a try has a timeout")
		wait := time.Until(deadline).Round(100 * time.Millisecond)
		waits = append(waits, wait)
		now = now.Add(wait) // the database never answers: the try waits out its timeout
		return nil, context.DeadlineExceeded
	}
	requireGivenUp(t, rec, batch(2))
	require.Equal(t, []time.Duration{30 * time.Second, 9900 * time.Millisecond}, waits,
		"a first try of up to 30 s, then what is left of the bound")
	require.Equal(t, stoppingTries, now.Sub(start))
}

// A worker that starts stopping while it retries a batch (the database
// away for a while already) bounds the tries from then, and a try that
// fails at once is tried ten times, as before.
func TestAStoppingRecorderTriesTenTimesWhenEachFailsAtOnce(t *testing.T) {
	rec, slept := newRecorder(t, &refusingStore{})
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	rec.wall = func() time.Time { return now }
	rec.sleep = func(d time.Duration) {
		*slept = append(*slept, d)
		now = now.Add(d)
	}
	tries := 0
	rec.stopping = func() bool { return tries >= 3 }
	rec.finish = func(context.Context, int64, engine.Clock, engine.Outcomes) ([]int64, error) {
		tries++
		return nil, errors.New("dial tcp: connection refused")
	}
	rec.gaveUp = func([]result) {}
	rec.record(context.Background(), 1, batch(2))
	require.Equal(t, 10, tries, "ten tries in all, the first three before stopping")
	require.Len(t, *slept, 9)
	require.Less(t, now.Sub(start), stoppingTries)
}

// guarantees.md, "Nothing lost": a database that does not answer holds a
// stopping worker no longer than stoppingTries, counted from the moment
// it began stopping, the try under way then included. Before, that try
// kept its 30 s and the bound began at the next one: about 70 s after the
// worker began stopping (seen through a proxy that stalled every
// connection).
func TestATryUnderWayWhenTheWorkerBeginsStoppingCountsAgainstTheBound(t *testing.T) {
	rec, _ := newRecorder(t, &refusingStore{})
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	stopAt := start.Add(10 * time.Second) // while the first try waits
	rec.wall = func() time.Time { return now }
	rec.sleep = func(d time.Duration) { now = now.Add(d) }
	rec.stopping = func() bool { return !now.Before(stopAt) }
	rec.since = func() time.Time {
		if rec.stopping() {
			return stopAt
		}
		return time.Time{}
	}
	rec.finish = func(ctx context.Context, _ int64, _ engine.Clock, _ engine.Outcomes) ([]int64, error) {
		deadline, ok := ctx.Deadline()
		require.True(t, ok, "a try has a timeout")
		now = now.Add(time.Until(deadline).Round(100 * time.Millisecond)) // the database never answers
		return nil, context.DeadlineExceeded
	}
	requireGivenUp(t, rec, batch(2))
	require.Equal(t, stoppingTries, now.Sub(stopAt), "within stoppingTries of the worker beginning to stop")
}

// requireGivenUp records rs with rec and requires that it gave up on all
// of them, leaving them to the reaper.
func requireGivenUp(t *testing.T, rec recorder, rs []result) {
	t.Helper()
	var gaveUp, want []int64
	rec.gaveUp = func(rs []result) {
		for _, r := range rs {
			gaveUp = append(gaveUp, r.id)
		}
	}
	for _, r := range rs {
		want = append(want, r.id)
	}
	rec.record(context.Background(), 1, rs)
	require.Equal(t, want, gaveUp, "given up on, left to the reaper")
}
