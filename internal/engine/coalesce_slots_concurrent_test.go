package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A call that debounces a pending job holding a concurrency slot gives the
// slot back in the enqueue's transaction, which by then holds the pending
// jobs its calls joined and locks the semaphores after them. Everything
// else that hands out slots (completions, claims, promotions, the
// dispatcher's upkeep) locks blocked jobs after the semaphores only
// skipping those another transaction holds, so it never waits for a job
// the enqueue holds while it holds a semaphore the enqueue waits for.
//
// Here a finish gives H's slot of acct back, holding acct, at the moment
// an enqueue in the caller's own transaction (which sluice cannot run
// again) holds the pending jobs P (ready, holding a slot of acct, which
// its call debounces) and Q (blocked on acct, joined by a call that does
// not move it) and is about to lock acct. The finish passes Q over and
// commits; the enqueue then gives P's slot to Q. Neither waits for the
// other in a cycle: the caller's transaction commits and the finish runs
// once.
func TestADebounceGivingASlotBackNeverDeadlocksWithAFinish(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		pending := func(key string, d time.Duration) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard, Debounce: d}}
			j.Conc = &engine.Conc{Key: "acct", To: 2, Duration: 3 * time.Minute}
			return j
		}
		h := enqueue(t, s, t0, slotted("acct", 2))[0]
		pid := register(t, s, t0)
		require.Equal(t, []int64{h}, ids(claim(t, s, pid, t0, 5).Jobs))
		pq := enqueue(t, s, t0, pending("co/p", time.Second), pending("co/q", time.Second))
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		p, q := pq[0], pq[1]
		require.True(t, state(t, s, p).HoldsSlot)
		require.Equal(t, engine.StateBlocked, state(t, s, q).State)

		// The caller's enqueue, on a pool of its own, signals when it holds
		// P and Q and is about to lock acct.
		re, recE := testdb.Record(open())
		holds := make(chan struct{})
		recE.Before = func(q string) {
			if strings.HasPrefix(q, "INSERT INTO sluice_semaphores (name)") {
				select {
				case <-holds:
				default:
					close(holds)
				}
			}
		}
		var wg sync.WaitGroup
		var enqErr error
		var res []engine.Enqueued
		rf, recF := testdb.Record(s)
		armed := true
		recF.Before = func(stmt string) {
			if !armed || !strings.Contains(stmt, "0 AS stream") {
				return
			}
			// The finish holds acct and is about to lock its blocked jobs.
			armed = false
			wg.Add(1)
			go func() {
				defer wg.Done()
				tx, err := re.DB().Begin(ctx)
				if err != nil {
					enqErr = err
					close(holds)
					return
				}
				if res, enqErr = re.Enqueue(ctx, tx, engine.At(at(1500*time.Millisecond)),
					[]engine.NewJob{pending("co/p", time.Second), pending("co/q", 0)}); enqErr != nil {
					_ = tx.Rollback(ctx)
					return
				}
				enqErr = tx.Commit(ctx)
			}()
			select {
			case <-holds:
			case <-time.After(10 * time.Second):
				t.Error("the enqueue never came to lock acct")
			}
		}
		run := runs(t, s, h)
		require.NoError(t, rf.Finish(ctx, pid, engine.At(at(1500*time.Millisecond)), engine.Outcomes{Completed: run, SlotHolders: run}))
		wg.Wait()
		require.NoError(t, enqErr, "the caller's transaction never gets a deadlock back")
		require.Equal(t, []int64{p, q}, []int64{res[0].ID, res[1].ID})
		finishes := 0
		for _, stmt := range recF.Take() {
			if strings.Contains(stmt, "0 AS stream") {
				finishes++
			}
		}
		require.Equal(t, 1, finishes, "the finish ran once: no deadlock failed it")
		require.Equal(t, engine.StateScheduled, state(t, s, p).State)
		require.False(t, state(t, s, p).HoldsSlot)
		require.Equal(t, engine.StateReady, state(t, s, q).State, "P's slot went to Q")
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct").Held)
	})
}

// Calls that keep debouncing pending jobs which hold concurrency slots, in
// callers' own transactions, while a worker promotes, claims (deferring
// jobs on a tight rate limit, which gives their slots back), completes,
// unparks and runs the dispatcher's upkeep on the same keys, each on its
// own pool, round after round at once: no caller's transaction ever fails
// (a deadlock would be returned to it), and every key counts exactly its
// holders, never more than its limit, with no ready job of a key left
// without a slot.
func TestDebouncedSlotHoldersUnderConcurrentWorkNeverDeadlock(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		const callers, rounds, keys = 3, 60, 8
		lim := limits{"r": spec(t, "r", 4, time.Second, 2)}
		call := func(r *rand.Rand) engine.NewJob {
			n := r.IntN(keys)
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: fmt.Sprintf("co/%d", n),
				Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard, Debounce: 200 * time.Millisecond}}
			j.Conc = &engine.Conc{Key: fmt.Sprintf("acct/%d", n%2), To: 2, Duration: time.Hour}
			if n%3 == 0 {
				j.RateKeys = []engine.RateKey{{Key: "r/x", Cost: 1}}
			}
			return j
		}
		stores := make([]*engine.Store, callers)
		rs := make([]*rand.Rand, callers)
		for c := range stores {
			stores[c], rs[c] = open(), rand.New(rand.NewPCG(uint64(c), 11))
		}
		w := open()
		pid := register(t, w, t0)
		ran := 0
		for round := range rounds {
			now := at(time.Duration(round) * 100 * time.Millisecond)
			var wg sync.WaitGroup
			for c, st := range stores {
				r := rs[c]
				if r.IntN(2) == 0 {
					continue
				}
				jobs := []engine.NewJob{call(r)}
				if r.IntN(2) == 0 {
					jobs = append(jobs, call(r))
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					tx, err := st.DB().Begin(ctx)
					if !assert.NoError(t, err) {
						return
					}
					assert.NoError(t, enqueueAndCommit(ctx, st, tx, now, jobs...), "caller %d round %d", c, round)
				}()
			}
			c := engine.At(now)
			_, _, err := w.Promote(ctx, c, 100)
			require.NoError(t, err)
			// A claim every third round, of one job: the calls find ready
			// jobs holding slots between them (no claim: Max 0).
			res, err := w.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: max(round%3-1, 0), Clock: c,
				Limits: lim, Horizon: time.Second, PromoteDue: true})
			require.NoError(t, err)
			var holders []engine.Run
			for _, j := range res.Jobs {
				if j.HoldsSlot {
					holders = append(holders, j.Run())
				}
			}
			require.NoError(t, w.Finish(ctx, pid, c, engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: holders}))
			ran += len(res.Jobs)
			_, _, err = w.MaintainSemaphores(ctx, c, 10)
			require.NoError(t, err)
			_, err = w.Unpark(ctx, c, time.Second, 10, 100)
			require.NoError(t, err)
			wg.Wait()
		}
		t.Logf("%d jobs ran", ran)
		require.Positive(t, ran)
		for _, key := range []string{"acct/0", "acct/1"} {
			heldMatchesHolders(t, s, key)
		}
		rows, err := s.DB().Query(ctx, `SELECT id FROM sluice_jobs WHERE conc_key IS NOT NULL AND holds_slot = FALSE AND state = 'ready'`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			t.Errorf("job %d is ready without a slot of its key", id)
		}
		require.NoError(t, rows.Err())
	})
}
