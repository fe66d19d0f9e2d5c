package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Fair shares meet a concurrency limit per key and a shared rate limit.

// docs/fairness.md, Rules: "A job a rate limit defers, or one blocked on a
// concurrency slot, keeps its place: when it is ready again it comes back
// at the front with the start it was enqueued with, so a limit's
// deferrals do not spend the key's turns"; and fairness is
// work-conserving.
//
// Tenants a, b, c, each at most one job at a time (a concurrency key per
// tenant, which is also its fairness key), all under one shared budget
// (3 a second, burst 2: two admissions in a claim a second). a's first job runs long: a is at its concurrency limit.
// While it runs, the budget's two admissions a second go to b and c,
// every round (a's blocked jobs take no turn and hold nothing back). When
// it finishes, a's next job comes back at the front: in the next round.
// No tenant ever runs two jobs at once.
func TestAFairKeyAtItsConcurrencyLimitNeitherBlocksNorLosesTurns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 3, time.Second, 2)}
		keyOf := map[int64]string{}
		for _, k := range []string{"a", "b", "c"} {
			jobs := make([]engine.NewJob, 6)
			for i := range jobs {
				jobs[i] = fairJob(k, 1)
				jobs[i].Conc = &engine.Conc{Key: "tenant/" + k, To: 1, Duration: time.Hour}
				jobs[i].RateKeys = []engine.RateKey{{Key: "r/global", Cost: 1}}
			}
			for _, id := range enqueue(t, s, t0, jobs...) {
				keyOf[id] = k
			}
		}
		pid := register(t, s, t0)
		var long *engine.Job
		var rounds [][]string
		for round := range 12 {
			now := at(time.Duration(round) * time.Second)
			if round == 6 {
				require.NotNil(t, long)
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: []engine.Run{long.Run()}, SlotHolders: []engine.Run{long.Run()}}))
			}
			_, _, err := s.Promote(ctx, engine.At(now), 100)
			require.NoError(t, err)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 3, Clock: engine.At(now),
				Limits: lim, Fair: true, PromoteDue: true, Horizon: time.Minute})
			require.NoError(t, err)
			var keys []string
			for _, j := range res.Jobs {
				keys = append(keys, keyOf[j.ID])
				if keyOf[j.ID] == "a" && long == nil {
					long = j
					continue
				}
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: []engine.Run{j.Run()}, SlotHolders: []engine.Run{j.Run()}}))
			}
			rounds = append(rounds, keys)
			for _, k := range []string{"a", "b", "c"} {
				heldMatchesHolders(t, s, "tenant/"+k)
			}
		}
		t.Logf("rounds: %v", rounds)
		for round := 1; round < 6; round++ {
			require.ElementsMatch(t, []string{"b", "c"}, rounds[round], "round %d, while a's first job runs: b and c take the budget's two admissions (rounds %v)", round, rounds)
		}
		require.Contains(t, rounds[6], "a", "a's job comes back at the front in the round after its first finished (rounds %v)", rounds)
		require.Equal(t, fmt.Sprint([]string{"a"}), fmt.Sprint(rounds[0][:1]), "a's first job came first")
	})
}
