package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// coalesceHolders are the jobs that hold each coalesce key, by key.
func coalesceHolders(t *testing.T, s *engine.Store) map[string][]int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT id, coalesce_key FROM sluice_jobs WHERE coalesce_key IS NOT NULL ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var id int64
		var key string
		require.NoError(t, rows.Scan(&id, &key))
		out[key] = append(out[key], id)
	}
	require.NoError(t, rows.Err())
	return out
}

// docs/coalesce.md: "a key has at most one pending job", the one every
// call joins. A coalescing job that failed or was cancelled (never
// claimed: its key freed at the cancel) gave its key up; an operator's
// retry makes it pending again without it, as a job retried after a
// claim is, and a call with its key, before or after the retry, starts a
// new pending job that takes the key, which the calls after it join. At
// no point do two jobs hold one key: the retried job runs once more, as
// the operator asked, and takes no call.
func TestAnOperatorsRetryOfAFinishedCoalescingJobTakesNoKey(t *testing.T) {
	for _, from := range []engine.State{engine.StateCancelled, engine.StateFailed} {
		for _, callFirst := range []bool{false, true} {
			name := string(from) + "/retried then called"
			if callFirst {
				name = string(from) + "/called then retried"
			}
			t.Run(name, func(t *testing.T) {
				testdb.Each(t, func(t *testing.T, s *engine.Store) {
					ctx := context.Background()
					a := enqueue(t, s, t0, coalescing("k/k"))[0]
					require.Equal(t, map[string][]int64{"k/k": {a}}, coalesceHolders(t, s))
					if from == engine.StateCancelled {
						_, err := s.CancelJobs(ctx, engine.At(t0), []int64{a}, "")
						require.NoError(t, err)
					} else {
						pid := register(t, s, t0)
						require.Equal(t, []int64{a}, ids(claim(t, s, pid, t0, 1).Jobs))
						require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
							engine.Transition{ID: a, State: engine.StateFailed, Error: "boom", Finished: true})}))
					}
					require.Equal(t, from, state(t, s, a).State)
					require.Empty(t, coalesceHolders(t, s), "a finished job holds no key")

					retry := func() {
						moved, err := s.RetryJobs(ctx, engine.At(at(time.Second)), []int64{a})
						require.NoError(t, err)
						require.Equal(t, []engine.Moved{{ID: a, State: engine.StateReady}}, moved)
					}
					call := func() engine.Enqueued {
						res, err := s.Enqueue(ctx, nil, engine.At(at(2*time.Second)), []engine.NewJob{coalescing("k/k")})
						require.NoError(t, err)
						return res[0]
					}
					var b engine.Enqueued
					if callFirst {
						b = call()
						retry()
					} else {
						retry()
						b = call()
					}
					require.False(t, b.Joined, "the retried job holds no key: the call starts a new job")
					require.NotEqual(t, a, b.ID)
					require.Equal(t, map[string][]int64{"k/k": {b.ID}}, coalesceHolders(t, s), "one job holds the key")

					c := call()
					require.Equal(t, engine.Enqueued{ID: b.ID, Joined: true, State: engine.StateReady}, c, "a later call joins the key's job")
					require.Equal(t, map[string][]int64{"k/k": {b.ID}}, coalesceHolders(t, s))
					require.Equal(t, engine.StateReady, state(t, s, a).State, "the retried job runs once more")
				})
			})
		}
	}
}
