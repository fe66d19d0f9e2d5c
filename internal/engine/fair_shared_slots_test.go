package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/fairness.md, Rules: "Combines with the other rules. A fair job may
// carry rate limits, a concurrency limit and a coalesce rule. A job a rate
// limit defers, or one blocked on a concurrency slot, keeps its place: when
// it is ready again it comes back at the front with the start it was
// enqueued with, so a limit's deferrals do not spend the key's turns."
//
// Tenants share one concurrency key (the kind's "at most 2 exports at
// once"), each tenant its own fairness key. Tenant b's jobs start beside
// a's first (both enqueued before any claim), so b is not behind the flood
// in fair order. But a slot given back goes to "the first blocked job of
// its key (by priority, then id)": the fair start plays no part, and every
// one of a's 20 jobs takes a slot before b's first. With parked jobs the
// same situation was fixed (parked fair jobs are handed slots by start);
// blocked ones were not.
func TestFairKeysSharingAConcurrencyKeyShareItsSlots(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		keyOf := map[int64]string{}
		add := func(key string, n int) {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = fairJob(key, 1)
				jobs[i].Conc = &engine.Conc{Key: "export/global", To: 2, Duration: time.Hour}
			}
			for _, id := range enqueue(t, s, t0, jobs...) {
				keyOf[id] = key
			}
		}
		add("a", 20)
		add("b", 3)
		pid := register(t, s, t0)
		var order []string
		for n := 0; n < 100 && len(order) < 23; n++ {
			now := at(time.Duration(n) * time.Second)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(now), Fair: true})
			require.NoError(t, err)
			for _, j := range res.Jobs {
				order = append(order, keyOf[j.ID])
			}
			if len(res.Jobs) > 0 {
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
			}
		}
		require.Len(t, order, 23, "every job ran")
		t.Logf("order: %v", order)
		aBefore, bSeen := 0, 0
		for _, k := range order {
			if k == "b" {
				if bSeen++; bSeen == 3 {
					break
				}
				continue
			}
			aBefore++
		}
		// Fair order would admit b's 3 jobs among the first 6 or 7.
		require.LessOrEqual(t, aBefore, 5, "a had %d slots before b's last (b has 3): order %v", aBefore, order)
	})
}

// docs/fairness.md, Approximations: a concurrency key's freed slot goes
// to its first blocked job by priority and id, and when that one is fair,
// to the fair job of its priority with the lowest start. So the jobs
// without a fairness key keep their place by id (fair ones neither jump
// nor starve them), and among the fair ones the keys take turns.
func TestAFreedSlotGoesToTheFairJobWithTheLowestStartInAFairJobsPlace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		conc := &engine.Conc{Key: "export/global", To: 1, Duration: time.Hour}
		name := map[int64]string{}
		add := func(label string, j engine.NewJob) {
			j.Conc = conc
			name[enqueue(t, s, t0, j)[0]] = label
		}
		add("a1", fairJob("a", 1))
		add("a2", fairJob("a", 1))
		add("a3", fairJob("a", 1))
		add("p1", job("p", "default", 0))
		add("b1", fairJob("b", 1))
		add("p2", job("p", "default", 0))
		pid := register(t, s, t0)
		var order []string
		for n := 0; n < 20 && len(order) < 6; n++ {
			now := at(time.Duration(n) * time.Second)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(now), Fair: true})
			require.NoError(t, err)
			for _, j := range res.Jobs {
				order = append(order, name[j.ID])
			}
			if len(res.Jobs) > 0 {
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
			}
		}
		// a1 took the slot at enqueue. The places after it by id are a2,
		// a3 (fair), p1, b1 (fair), p2: b1 (start 0, beside a1's) takes the
		// first fair place, a2 and a3 the next two, and p1 and p2 keep
		// theirs.
		require.Equal(t, []string{"a1", "b1", "a2", "a3", "p1", "p2"}, order)
	})
}
