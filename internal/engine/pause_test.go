package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/guarantees.md, Queues: pausing a queue stops claims from it at
// once. A claim with PromoteDue (what every worker with rate limits sends)
// once took the due jobs waiting on a rate limit without the paused check.
func TestAPausedQueueIsNotClaimedThroughItsDueWaitingJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, 0)
		require.Equal(t, []int64{got[0]}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, got[1]).State, "waits on its rate limit until 1 s")

		require.NoError(t, s.PauseQueue(ctx, "default", t0))
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(at(2 * time.Second)),
			Limits: lim, PromoteDue: true})
		require.NoError(t, err)
		require.Empty(t, ids(res.Jobs), "the queue is paused: nothing may be claimed from it")
		require.NotEqual(t, engine.StateRunning, state(t, s, got[1]).State)
	})
}

// PauseQueue checks the name by the key rule enqueues follow. It once took
// any non-empty name: "mail " was stored as a queue of its own and, on
// MySQL, whose comparisons ignore trailing spaces, paused "mail" too.
func TestPauseQueueChecksTheName(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("a", "mail", 0))[0]
		pid := register(t, s, t0)
		if err := s.PauseQueue(ctx, "mail ", t0); err == nil {
			t.Errorf("PauseQueue(%q) succeeded: a queue name no job can have (trailing space) is not refused", "mail ")
		}
		if got := ids(claim(t, s, pid, t0, 5, "mail").Jobs); len(got) != 1 || got[0] != id {
			t.Errorf("pausing %q paused queue mail: claim got %v, want [%d]", "mail ", got, id)
		}
	})
}
