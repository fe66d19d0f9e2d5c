package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// TestOverlappingLimitsHoldAcrossClaimersWithoutDeadlock runs claimers on
// their own connection pools over jobs that each draw on two budgets —
// their account's and a shared one — locked in one global order: neither
// bound is ever exceeded, and no claim deadlocks. Half the claimers pass
// their last claim's budgets as the next one's hint, as a worker does, so
// claims complete hints that missed budgets while others hold them.
func TestOverlappingLimitsHoldAcrossClaimersWithoutDeadlock(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) { overlappingClaimers(t, b, 120, 0, 5, false, [2]int{4, 6}) })
	}
}

// TestClaimsOnSnapshotsHoldOverlappingLimits is the test above with claims
// of two over 600 jobs, every claimer passing its hint, and limits five and
// ten times as wide: many claims find on the snapshot of their budgets that both
// candidates are admitted, mark them running before locking the budgets,
// and decide again under the lock, while other claims take from the same
// budgets in between (snapshot.go); some then find too little left and
// start again. Neither bound is ever exceeded, by the times the claims
// decided at. SQLite, whose claims take its one write lock in turn (and
// are not held to reading snapshots), gets 200 jobs: under -race each of
// its claims costs many times what it costs the others.
func TestClaimsOnSnapshotsHoldOverlappingLimits(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			n := 600
			if b.Name == "sqlite" {
				n = 200
			}
			snapshots, _ := overlappingClaimers(t, b, n, 0, 2, true, [2]int{20, 60})
			if b.Name != "sqlite" {
				require.Greater(t, snapshots, 50, "claims read their budgets as a snapshot")
			}
		})
	}
}

// TestClaimsThatYieldHoldOverlappingLimits is the first test above with as
// many unlimited jobs as limited ones among them: claims that have
// unlimited jobs to take lock only the budgets no other claim holds and
// leave the rest of their limited jobs ready (yield.go), while the others
// wait for theirs. Neither bound is ever exceeded, every job runs once,
// and claims do yield where claims lock rows. Whether two claims meet on a
// budget is the scheduler's call: a run yields 5–20 candidates, and now
// and then none (1 of 22 runs on MySQL, and one CI run), so a run that
// yielded none is repeated, up to three runs in all (each checks the
// bounds again). SQLite, where nothing yields, gets a third of the jobs:
// under -race each of its claims costs many times what it costs the
// others.
func TestClaimsThatYieldHoldOverlappingLimits(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			yielded, runs, n := 0, 3, 300
			if b.Name == "sqlite" {
				runs = 1 // a transaction holds the only write lock: nothing to yield to
				n = 100
			}
			for run := 0; run < runs && yielded == 0; run++ {
				_, yielded = overlappingClaimers(t, b, n, n, 5, true, [2]int{10, 15})
				t.Logf("run %d: claims yielded %d candidates", run+1, yielded)
			}
			if b.Name != "sqlite" {
				require.Positive(t, yielded, "claims left jobs of held budgets ready")
			}
		})
	}
}

// overlappingClaimers runs 4 claimers of up to max jobs over n limited jobs
// on 6 accounts and plain unlimited ones, the claimers passing hints (all,
// or every other one), checks both bounds (to per 100 ms: an account's,
// the shared one; each with a burst of half) and that every job ran once,
// and returns how many claims read their hint as a snapshot and how many
// candidates claims yielded.
func overlappingClaimers(t *testing.T, b testdb.Backend, n, plain, max int, hintAll bool, to [2]int) (snapshots, yielded int) {
	url := b.URL(t)
	ctx := context.Background()
	lim := limits{
		"acct": spec(t, "acct", to[0], 100*time.Millisecond, to[0]/2), // per account
		"api":  spec(t, "api", to[1], 100*time.Millisecond, to[1]/2),  // all accounts
	}
	open := testdb.Opener(t, url)
	s := open()
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	snapshot := func(q string) bool {
		return strings.HasPrefix(q, "SELECT") && strings.Contains(q, "FROM sluice_budgets") && !strings.Contains(q, "FOR UPDATE")
	}
	const accounts = 6
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = job("k", "default", 0)
		// Half list the shared budget first: the claim must lock in
		// one global order whatever the order a job declares.
		keys := []engine.RateKey{{Key: fmt.Sprintf("acct/%d", i%accounts), Cost: 1}, {Key: "api/global", Cost: 1}}
		if i%2 == 0 {
			keys[0], keys[1] = keys[1], keys[0]
		}
		jobs[i].RateKeys = keys
	}
	for i := range plain {
		// Interleaved with the limited ones, in id order.
		at := min(2*i+1, len(jobs))
		jobs = slices.Insert(jobs, at, job("k", "default", 0))
	}
	enqueue(t, s, time.Now(), jobs...)
	var mu sync.Mutex
	admitted := map[string][]time.Time{}
	total, ran := 0, map[int64]int{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(40 * time.Second)
	for w := 0; w < 4; w++ {
		cs, rec := testdb.Record(open())
		pid := register(t, cs, time.Now())
		wg.Add(1)
		hinted := hintAll || w%2 == 0
		go func() {
			defer wg.Done()
			var hint []string
			for time.Now().Before(deadline) {
				mu.Lock()
				done := total >= n+plain
				mu.Unlock()
				if done {
					break
				}
				if _, _, err := cs.Promote(ctx, engine.At(time.Now()), 100); !assertNoErr(t, err) {
					return
				}
				if _, err := cs.Unpark(ctx, engine.At(time.Now()), 0, 10, 0); !assertNoErr(t, err) {
					return
				}
				res, err := cs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: max,
					Clock: engine.DatabaseTime(time.Now), Limits: lim, BudgetHint: hint, SnapshotHint: hintAll})
				if !assertNoErr(t, err) {
					return
				}
				if hinted {
					hint = res.Budgets
				}
				mu.Lock()
				yielded += res.Yielded
				for _, j := range res.Jobs {
					ran[j.ID]++
					for _, rk := range j.RateKeys {
						admitted[rk.Key] = append(admitted[rk.Key], res.DecidedAt)
					}
				}
				total += len(res.Jobs)
				mu.Unlock()
			}
			mu.Lock()
			for _, q := range rec.Take() {
				if snapshot(q) {
					snapshots++
				}
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, n+plain, total, "every job was admitted, and no claimer stopped on an error")
	require.Len(t, ran, n+plain, "none twice")
	require.LessOrEqual(t, ratelimit.BusiestWindow(admitted["api/global"], 100*time.Millisecond), to[1])
	for a := 0; a < accounts; a++ {
		require.LessOrEqual(t, ratelimit.BusiestWindow(admitted[fmt.Sprintf("acct/%d", a)], 100*time.Millisecond), to[0])
	}
	return snapshots, yielded
}

// TestShadowModeRecordsTheDecisionsAnEnforcingRunMakes feeds one trace to
// an enforcing limit and to the same limit in shadow mode: shadow runs
// every job, and flags as would-defer exactly the jobs enforcement defers.
func TestShadowModeRecordsTheDecisionsAnEnforcingRunMakes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		enforcing := limits{"e": spec(t, "e", 3, time.Second, 2)}
		sh := spec(t, "s", 3, time.Second, 2)
		sh.Shadow = true
		shadow := limits{"s": sh}
		pid := register(t, s, t0)
		now := t0
		arrivals := []int{4, 0, 1, 3, 0, 2, 5, 1, 0, 2}
		for step, n := range arrivals {
			var e, sj []engine.NewJob
			for i := 0; i < n; i++ {
				a, b := limited("k", "e/x"), limited("k", "s/x")
				a.Queue, b.Queue = "enforcing", "shadow"
				e, sj = append(e, a), append(sj, b)
			}
			if n > 0 {
				enqueue(t, s, now, e...)
				enqueue(t, s, now, sj...)
			}
			re := claimLimited(t, s, pid, now, 100, enforcing, time.Hour, "enforcing")
			rs := claimLimited(t, s, pid, now, 100, shadow, time.Hour, "shadow")
			require.Len(t, rs.Jobs, n, "step %d: shadow mode runs everything", step)
			require.Empty(t, rs.Deferred)
			require.Len(t, re.Jobs, n-len(re.Deferred))
			require.Equal(t, len(re.Deferred), len(rs.Shadowed), "step %d: the same decisions", step)
			now = now.Add(300 * time.Millisecond)
		}
		bs, err := s.ListBudgets(context.Background())
		require.NoError(t, err)
		require.Len(t, bs, 2)
		require.Equal(t, bs[0].TAT, bs[1].TAT, "the shadow budget advanced exactly as the enforcing one")
	})
}

func TestACostChargesSeveralTokens(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"bulk": spec(t, "bulk", 5, time.Second, 5)} // T = 1 s, 5 tokens at once
		big := limited("k", "bulk/x")
		big.RateKeys[0].Cost = 4
		got := enqueue(t, s, t0, big, limited("k", "bulk/x"), limited("k", "bulk/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.Equal(t, []int64{got[0], got[1]}, ids(res.Jobs), "4 tokens, then 1: the burst of 5 is spent")
		require.Equal(t, at(time.Second), res.Deferred[0].Until)

		_, err := s.Enqueue(context.Background(), nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1,
			RateKeys: []engine.RateKey{{Key: "a\tb", Cost: 1}}}})

		require.ErrorContains(t, err, "contains a tab")
	})
}

// A claim that needs a budget row that does not exist yet and sorts before
// a budget it has locked does not create it while it holds that budget:
// another transaction creating the same row, which then locks that budget
// in key order, would wait for the claim while the claim waited for it (a
// deadlock PostgreSQL breaks only after a second). The claim creates the
// row on its own, holding nothing, and claims again. Here the other
// transaction creates k/a and locks k/c at the very moment the claim
// creates k/a: it never waits, and the claim admits its job on both. The
// same holds for a claim that also takes an unlimited job, which locks
// only the budgets no one holds (yield.go).
func TestAClaimCreatesNoBudgetWhileItHoldsOneAfterIt(t *testing.T) {
	for _, unlimited := range []bool{false, true} {
		t.Run(fmt.Sprintf("unlimited=%v", unlimited), func(t *testing.T) { claimCreatingABudget(t, unlimited) })
	}
}

func claimCreatingABudget(t *testing.T, unlimited bool) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 10, time.Second, 10)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, limited("k", "k/c"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1) // k/c's row exists
		both := limited("k", "k/a")
		both.RateKeys = append(both.RateKeys, engine.RateKey{Key: "k/c", Cost: 1})
		id := enqueue(t, s, t0, both)[0]
		want := []int64{id}
		if unlimited {
			want = append(want, enqueue(t, s, t0, job("free", "default", 0))[0])
		}

		other := open()
		insert, _ := s.SQL().InsertBudgets([]string{"k/a"})
		rs, rec := testdb.Record(s)
		var otherErr error
		created := false
		rec.Before = func(q string) {
			if q != insert || created || !s.Dialect().Capabilities().RowLocks {
				return // SQLite: the claim holds the only write lock
			}
			created = true
			// Bounded, so that a claim holding k/c fails the test
			// instead of hanging it.
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			otherErr = createAndLock(wait, other, "k/a", "k/c")
		}
		res, err := rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2,
			Clock: engine.At(t0), Limits: lim})
		require.NoError(t, err)
		require.Equal(t, s.Dialect().Capabilities().RowLocks, created, "the claim created k/a where rows are locked one by one")
		require.NoError(t, otherErr, "the other transaction waited for nothing the claim held")
		require.ElementsMatch(t, want, ids(res.Jobs))
		require.Equal(t, at(time.Second).UnixNano(), budgetNamed(t, s, "k/a").TAT, "k/a charged once")
		require.Equal(t, at(2*time.Second).UnixNano(), budgetNamed(t, s, "k/c").TAT, "k/c charged twice")
	})
}

// createAndLock creates the budget row create and locks the budget row
// lock in one transaction of s, as a claim creating a budget does.
func createAndLock(ctx context.Context, s *engine.Store, create, lock string) error {
	return createAndLockRows(ctx, s, s.SQL().InsertBudgets, s.SQL().LockBudgets, create, lock)
}

// createAndLockRows creates the row create with insert and locks the row
// lock with lockRows in one transaction of s.
func createAndLockRows(ctx context.Context, s *engine.Store, insert, lockRows func([]string) (string, []any), create, lock string) error {
	tx, err := s.DB().Begin(ctx)
	if err != nil {
		return err
	}
	err = func() error {
		q, args := insert([]string{create})
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return err
		}
		q, args = lockRows([]string{lock})
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		rows.Close()
		return rows.Err()
	}()
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}
