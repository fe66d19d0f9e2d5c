package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Fair jobs parked on a rate limit: they come back in fair order, beside
// the budget's other parked jobs (docs/fairness.md, "Rules";
// docs/rate-limits.md, "The horizon").

// docs/fairness.md, Rules: "A fair job may carry rate limits ... A job a
// rate limit defers ... keeps its place: when it is ready again it comes
// back at the front with the start it was enqueued with, so a limit's
// deferrals do not spend the key's turns." and "Shares. While at least two
// keys have ready jobs, each key's claims, over any stretch of claims, are
// its weighted share within one job per key".
//
// Key a floods (40 jobs), key b has 5, all on one budget (api/global, 1 a
// second) with a horizon of 5 s, so most of both keys' jobs wait parked on
// it. Their starts interleave (b's first job starts beside a's first), so
// fair order admits b's 5 jobs among the first 10 or so. A worker drains
// the budget claim by claim on the fake clock, with the dispatcher's
// promotion and unparking: by b's last admission, a must have had about
// its share (5, give or take one job per key), not the flood's head.
func TestParkedFairJobsComeBackInFairOrder(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"api": spec(t, "api", 1, time.Second, 1)}
		keyOf := map[int64]string{}
		add := func(key string, n int) {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = fairJob(key, 1)
				jobs[i].RateKeys = []engine.RateKey{{Key: "api/global", Cost: 1}}
			}
			for _, id := range enqueue(t, s, t0, jobs...) {
				keyOf[id] = key
			}
		}
		add("a", 40)
		add("b", 5)
		pid := register(t, s, t0)
		var order []string
		for step := 0; step < 1000 && len(order) < 45; step++ {
			now := at(time.Duration(step) * 100 * time.Millisecond)
			_, _, err := s.Promote(ctx, engine.At(now), 500)
			require.NoError(t, err)
			_, err = s.Unpark(ctx, engine.At(now), 5*time.Second, 100, 500)
			require.NoError(t, err)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(now),
				Limits: lim, Fair: true, PromoteDue: true, Horizon: 5 * time.Second})
			require.NoError(t, err)
			for _, j := range res.Jobs {
				order = append(order, keyOf[j.ID])
			}
			if len(res.Jobs) > 0 {
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runsOf(res.Jobs)}))
			}
		}
		require.Len(t, order, 45, "every job ran")
		aBefore, bSeen := 0, 0
		for _, k := range order {
			if k == "b" {
				bSeen++
				if bSeen == 5 {
					break
				}
				continue
			}
			aBefore++
		}
		require.LessOrEqual(t, aBefore, 6, "a had %d admissions before b's last (b has 5): order %v", aBefore, order)
	})
}

// A budget's parked jobs are two streams, unparked as a claim takes ready
// jobs: those without a fairness key by (priority, id), fair ones by
// (priority, virtual start, id), the two merged at their heads by
// (priority, id). Priorities come first in both.
func TestParkedJobsOfBothStreamsComeBackMergedAtTheirHeads(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"api": spec(t, "api", 1, time.Minute, 1)}
		on := func(j engine.NewJob, prio int) engine.NewJob {
			j.Priority = prio
			j.RateKeys = []engine.RateKey{{Key: "api/global", Cost: 1}}
			return j
		}
		plain := func(prio int) engine.NewJob { return on(job("p", "default", 0), prio) }
		fair := func(key string, prio int) engine.NewJob { return on(fairJob(key, 1), prio) }
		// Starts at priority 1: a 0, 1, 2; b, enqueued after a, 0, 1
		// (the level's virtual time is a's first start). At priority 0,
		// c starts at 0.
		got := enqueue(t, s, t0,
			fair("a", 1), fair("a", 1), fair("a", 1), // 0 1 2
			plain(1), plain(1), // 3 4
			fair("b", 1), fair("b", 1), // 5 6
			plain(0),     // 7
			fair("c", 0), // 8
		)
		pid := register(t, s, t0)
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20, Clock: engine.At(t0),
			Limits: lim, Fair: true, Horizon: time.Second})
		require.NoError(t, err)
		require.Equal(t, []int64{got[7]}, ids(res.Jobs), "the most urgent, oldest job is admitted")
		for _, d := range res.Deferred {
			require.True(t, d.Parked, "every slot lies past the horizon of a second")
		}
		require.Len(t, res.Deferred, len(got)-1)

		n, err := s.Unpark(ctx, engine.At(at(time.Minute)), time.Hour, 100, 0)
		require.NoError(t, err)
		require.Equal(t, len(got)-1, n)
		var order []int64
		for _, id := range got {
			if id != got[7] {
				order = append(order, id)
			}
		}
		slices.SortFunc(order, func(x, y int64) int { return state(t, s, x).RunAt.Compare(state(t, s, y).RunAt) })
		want := []int64{
			got[8],         // priority 0 first: c (the plain one there ran)
			got[0],         // priority 1: fair head a (id 0) before plain head (id 3)
			got[3], got[4], // plain heads (3, 4) before the fair head b (id 5, start 0)
			got[5], got[1], got[6], got[2], // the fair stream by start: b0, a1, b1, a2
		}
		require.Equal(t, want, order)
	})
}

// sluice explain counts a parked fair job's place in fair order: a light
// key's job parked behind a flood has the flood's first jobs ahead of it,
// not all of them.
func TestExplainCountsAParkedFairJobsPlaceInFairOrder(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"api": spec(t, "api", 1, time.Minute, 1)}
		add := func(key string, n int) []int64 {
			jobs := make([]engine.NewJob, n)
			for i := range jobs {
				jobs[i] = fairJob(key, 1)
				jobs[i].RateKeys = []engine.RateKey{{Key: "api/global", Cost: 1}}
			}
			return enqueue(t, s, t0, jobs...)
		}
		a := add("a", 20)
		b := add("b", 2)
		pid := register(t, s, t0)
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 30, Clock: engine.At(t0),
			Limits: lim, Fair: true, Horizon: time.Second})
		require.NoError(t, err)
		require.Equal(t, []int64{a[0]}, ids(res.Jobs))
		ahead := func(id int64) int64 {
			f, err := s.ExplainFacts(ctx, id, t0, nil)
			require.NoError(t, err)
			require.Equal(t, engine.StateParked, f.Job.State)
			for _, bf := range f.Budgets {
				if bf.Waiting {
					return bf.Ahead.N
				}
			}
			t.Fatalf("job %d waits on no budget", id)
			return 0
		}
		// Fair order of the parked jobs: b0 (start 0), a1, b1 (start 1), a2, …
		require.EqualValues(t, 0, ahead(b[0]))
		require.EqualValues(t, 1, ahead(a[1]), "b0")
		require.EqualValues(t, 2, ahead(b[1]), "b0 and a1")
		require.EqualValues(t, 3, ahead(a[2]), "b0, a1 and b1")
		require.EqualValues(t, 20, ahead(a[19]), "every other parked job")
	})
}
