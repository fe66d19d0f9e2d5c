package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Fair jobs that never run give back their key's charge
// (docs/fairness.md): a key whose jobs were cancelled before any claim,
// discarded by a concurrency limit or joined to a pending job has used
// none of its share, so its next job starts beside the other keys' next
// ones ("A key that was idle gets its first job claimed within one round
// of the active keys"), not behind the virtual finish of jobs that never
// ran.

// roundOf claims one job at a time until key's comes, and returns in
// which claim it came.
func (r *fairRig) roundOf(key string, most int) int {
	r.t.Helper()
	for round := 1; round <= most; round++ {
		keys := r.claim(1)
		require.Len(r.t, keys, 1)
		if keys[0] == key {
			return round
		}
	}
	r.t.Fatalf("no job of key %s in %d claims", key, most)
	return 0
}

func TestCancellingAFairKeysFloodDoesNotStarveItsNextJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		flood := r.add("runaway", 1, 80, nil)
		r.add("steady", 1, 30, nil)
		// The operator cancels the runaway key's flood.
		done, err := s.CancelJobs(ctx, engine.At(r.now), flood, "runaway tenant")
		require.NoError(t, err)
		require.Len(t, done, len(flood))
		// The tenant's next, legitimate job.
		next := r.add("runaway", 1, 1, nil)[0]
		// Within one round of the one active key: the first or second claim.
		round := r.roundOf("runaway", 40)
		require.LessOrEqual(t, round, 2, "the cancelled key's next job %d was claimed in round %d, after %d of the other key's jobs (it has 30): it waited behind the virtual finish of 80 cancelled jobs that never ran", next, round, round-1)
	})
}

// The dashboard's "cancel all matching" cancels one job per call, newest
// first: each cancel gives back the key's charge down to that job's start.
func TestCancellingAFairFloodOneJobAtATimeNewestFirstDoesNotStarveItsNextJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		flood := r.add("runaway", 1, 40, nil)
		r.add("steady", 1, 30, nil)
		for i := len(flood) - 1; i >= 0; i-- {
			_, err := s.CancelJobs(ctx, engine.At(r.now), flood[i:i+1], "")
			require.NoError(t, err)
		}
		r.add("runaway", 1, 1, nil)
		require.LessOrEqual(t, r.roundOf("runaway", 40), 2)
	})
}

func TestDiscardedFairJobsDoNotStarveTheirKeysNextJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		discard := func(j *engine.NewJob) { j.Conc = &engine.Conc{Key: "d/1", To: 1, Duration: time.Minute, Discard: true} }
		flood := r.add("runaway", 1, 100, discard)
		r.add("steady", 1, 50, nil)
		discarded := 0
		for _, id := range flood {
			if state(t, s, id).State == engine.StateCancelled {
				discarded++
			}
		}
		require.Equal(t, 99, discarded)
		// Enqueues of one job each, discarded too.
		for range 20 {
			require.Equal(t, engine.StateCancelled, state(t, s, r.add("runaway", 1, 1, discard)[0]).State)
		}
		// The one that took the slot runs and finishes.
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: r.pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(r.now), Fair: true})
		require.NoError(t, err)
		require.Equal(t, flood[:1], ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, r.pid, engine.At(r.now), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
		next := r.add("runaway", 1, 1, discard)[0]
		require.Equal(t, engine.StateReady, state(t, s, next).State)
		// The key's job that ran, at start 0, went before the other key's
		// first one: its next job starts at 1, beside the other key's
		// second one, which goes first (ties go by id).
		round := r.roundOf("runaway", 60)
		require.LessOrEqual(t, round, 3, "the key's next job %d was claimed in round %d, behind %d of the other key's jobs: charged for 119 discarded jobs", next, round, round-1)
	})
}

// A coalescing call that joins the pending job of its key adds no job:
// it does not charge the key either, in a batch or alone.
func TestCoalescingCallsThatJoinDoNotStarveTheirKeysNextJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		join := func(j *engine.NewJob) {
			j.Coalesce = &engine.Coalesce{Key: "co/runaway", Rule: coalesce.Spec{OnConflict: coalesce.Discard}}
		}
		pending := r.add("runaway", 1, 40, join)
		for range 40 {
			require.Equal(t, pending[:1], r.add("runaway", 1, 1, join))
		}
		for _, id := range pending {
			require.Equal(t, pending[0], id, "every call joined the one pending job")
		}
		r.add("steady", 1, 30, nil)
		require.LessOrEqual(t, r.roundOf("runaway", 40), 2, "the pending job")
		// The pending job ran at start 0: the key's next job starts at 1,
		// beside the other key's second job, which goes first.
		next := r.add("runaway", 1, 1, nil)[0]
		round := r.roundOf("runaway", 40)
		require.LessOrEqual(t, round, 3, "the key's next job %d was claimed in round %d, behind %d of the other key's jobs: charged for 79 calls that joined", next, round, round-1)
	})
}

// A key that used its share waits for its finish: cancelling a later job
// gives back that job's step only, and a job cancelled while a later job
// of its key waits gives back nothing.
func TestAFairKeyThatRanStillWaitsForItsFinishAfterALaterJobIsCancelled(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		// Starts (in steps): a 0…9, b 0…9.
		r.add("a", 1, 10, nil)
		r.add("b", 1, 10, nil)
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: r.pid, Queues: []string{"default"}, Max: 10, Clock: engine.At(r.now), Fair: true})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 10, "a 0…4 and b 0…4")
		require.NoError(t, s.Finish(ctx, r.pid, engine.At(r.now), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		// a's job at 10 is cancelled: its finish goes back to 10, not to
		// the virtual time (5).
		x := r.add("a", 1, 1, nil)
		_, err = s.CancelJobs(ctx, engine.At(r.now), x, "")
		require.NoError(t, err)
		r.add("a", 1, 1, nil) // 10
		require.Equal(t, "a b a b a b a b a b a", strings.Join(r.claim(11), " "),
			"a's next job waits behind b's jobs before its finish")

		// Nothing is ready: the virtual time is the latest finish, 11. b
		// gets 11 and 12; the one at 11 is cancelled while the one at 12
		// waits, which keeps b's finish at 13.
		r.add("a", 1, 3, nil) // 11, 12, 13
		y := r.add("b", 1, 1, nil)
		r.add("b", 1, 1, nil) // 12
		_, err = s.CancelJobs(ctx, engine.At(r.now), y, "")
		require.NoError(t, err)
		r.add("b", 1, 1, nil) // 13, not 11
		require.Equal(t, "a a b a b", strings.Join(r.claim(5), " "))
	})
}

// Cancelling jobs that are not fair, or fair jobs that already ran,
// touches no fairness key; an enqueue whose fair job a limit discards
// runs the statements of one whose job it keeps.
func TestGivingBackFairTurnsCostsNothingWhereNoneIsDue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		rs, rec := testdb.Record(s)
		pid := register(t, s, t0)
		plain := enqueue(t, s, t0, job("a", "default", 0))
		fair := enqueue(t, s, t0, fairJob("k", 1))
		// The fair job runs, and is snoozed back to wait.
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Clock: engine.At(t0), Fair: true})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 2)
		for _, j := range res.Jobs {
			if j.ID == fair[0] {
				require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: []engine.Transition{{ID: j.ID, Claim: j.Claims, State: engine.StateScheduled, RunAt: t0.Add(time.Hour)}}}))
			}
		}
		other := enqueue(t, s, t0, job("a", "default", 0))
		rec.Take()
		_, err = rs.CancelJobs(ctx, engine.At(t0), []int64{other[0], fair[0]}, "")
		require.NoError(t, err)
		for _, q := range rec.Take() {
			require.NotContains(t, q, "sluice_fair_keys")
		}
		_ = plain

		conc := func(key string) engine.NewJob {
			j := fairJob("d", 1)
			j.Conc = &engine.Conc{Key: key, To: 1, Duration: time.Minute, Discard: true}
			return j
		}
		holder := job("a", "default", 0)
		holder.Conc = &engine.Conc{Key: "full", To: 1, Duration: time.Minute}
		enqueue(t, s, t0, holder)
		rec.Take()
		fairStmts := func() []string {
			var out []string
			for _, q := range rec.Take() {
				if strings.Contains(q, "sluice_fair_keys") {
					out = append(out, q)
				}
			}
			return out
		}
		got := enqueue(t, rs, t0, conc("free"))
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
		kept := fairStmts()
		require.Len(t, kept, 4, "insert, lock, virtual time, save: %q", kept)
		got = enqueue(t, rs, t0, conc("full"))
		require.Equal(t, engine.StateCancelled, state(t, s, got[0]).State)
		require.Equal(t, kept, fairStmts(), "a discarded fair job's enqueue runs the same fairness statements")
	})
}

// One cancel of several keys' floods gives each key back its charge, the
// keys' rows locked in key order.
func TestCancellingTheFloodsOfSeveralFairKeysAtOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		x := r.add("x", 1, 20, nil)
		y := r.add("y", 2, 20, nil)
		r.add("steady", 1, 30, nil)
		var flood []int64
		for i := range x {
			flood = append(flood, y[i], x[i])
		}
		done, err := s.CancelJobs(ctx, engine.At(r.now), flood, "")
		require.NoError(t, err)
		require.Len(t, done, len(flood))
		r.add("x", 1, 1, nil)
		r.add("y", 2, 1, nil)
		require.ElementsMatch(t, []string{"steady", "x", "y"}, r.claim(3), "each key's next job starts beside the steady key's first")
	})
}

// A job cancelled before any claim gives nothing back while a later job
// of its key waits or runs: the key used, or holds, the turns after it.
func TestACancelledFairJobBeforeALaterOneThatWaitsOrRunsGivesNothingBack(t *testing.T) {
	for _, later := range []string{"scheduled", "running"} {
		t.Run(later, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				r := newFairRig(t, s)
				delayed := func(j *engine.NewJob) { j.RunAt = r.now.Add(time.Hour) }
				first := r.add("a", 1, 1, delayed) // start 0
				want := 4                          // b 0, 1 and 2 go before a's next job at 2
				if later == "scheduled" {
					r.add("a", 1, 1, delayed) // 1
					r.add("b", 1, 10, nil)    // 0…9
				} else {
					r.add("a", 1, 1, nil)  // 1
					r.add("b", 1, 10, nil) // 1…10, from a's ready job
					require.Equal(t, []string{"a"}, r.claim(1))
					want = 3 // b 1 and 2 go first
				}
				_, err := s.CancelJobs(ctx, engine.At(r.now), first, "")
				require.NoError(t, err)
				r.add("a", 1, 1, nil)
				require.Equal(t, want, r.roundOf("a", 12), "a's next job starts at its finish, 2")
			})
		})
	}
}
