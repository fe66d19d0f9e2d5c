package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Every failed run keeps its error with the job, in order; a run given
// back (an upstream 429) is not a failed attempt; the errors go with the
// job, whether it is deleted as it completes or by the cleaner.
func TestEveryFailedAttemptKeepsItsError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		long := strings.Repeat("é", 8000) + " 🙂"
		enq := enqueue(t, s, t0, job("k", "default", 0), job("k", "default", 0))
		a, b := enq[0], enq[1]
		run := func(now time.Time, want ...int64) {
			t.Helper()
			res := claim(t, s, pid, now, 10)
			require.ElementsMatch(t, want, ids(res.Jobs))
		}
		retry := func(now time.Time, id int64, err string, delta int) engine.Transition {
			return engine.Transition{ID: id, State: engine.StateScheduled, RunAt: now.Add(time.Second), Error: err, AttemptDelta: delta}
		}
		run(t0, a, b)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: []engine.Transition{
			retry(t0, a, "first: connection reset", 0), retry(t0, b, long, 0)}}))
		promote(t, s, t0.Add(time.Second))
		run(t0.Add(time.Second), a, b)
		// a is turned away by its upstream (429: no attempt spent); b fails again.
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(time.Second)), engine.Outcomes{Others: []engine.Transition{
			retry(t0.Add(time.Second), a, "upstream said wait", -1), retry(t0.Add(time.Second), b, "second: timeout", 0)}}))

		as, err := s.Attempts(ctx, a)
		require.NoError(t, err)
		require.Len(t, as, 1, "the 429 is not a failed attempt")
		require.Equal(t, 1, as[0].Attempt)
		require.Equal(t, "first: connection reset", as[0].Error)
		require.Equal(t, t0, as[0].FailedAt)
		bs, err := s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Len(t, bs, 2)
		require.Equal(t, 1, bs[0].Attempt)
		require.Equal(t, long, bs[0].Error, "a long error with multi-byte characters, whole")
		require.Equal(t, 2, bs[1].Attempt)
		require.Equal(t, "second: timeout", bs[1].Error)

		// a completes and is deleted at once, its kept error with it; b
		// completes, is kept, and goes with the cleaner.
		promote(t, s, t0.Add(2*time.Second))
		run(t0.Add(2*time.Second), a, b)
		s.DeleteOnComplete = true
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Second)), engine.Outcomes{Completed: []int64{a}, WithAttempts: []int64{a}}))
		as, err = s.Attempts(ctx, a)
		require.NoError(t, err)
		require.Empty(t, as)
		s.DeleteOnComplete = false
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Second)), engine.Outcomes{Completed: []int64{b}}))
		bs, err = s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Len(t, bs, 2, "kept while the job is kept")
		n, err := s.DeleteFinished(ctx, t0.Add(time.Hour), 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		bs, err = s.Attempts(ctx, b)
		require.NoError(t, err)
		require.Empty(t, bs)
	})
}

func promote(t *testing.T, s *engine.Store, now time.Time) {
	t.Helper()
	_, _, err := s.Promote(context.Background(), engine.At(now), 100)
	require.NoError(t, err)
}
