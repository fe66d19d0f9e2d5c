package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "Changing a limit": "A looser limit (a shorter
// interval) does not inherit all the debt the old one built: it is capped
// at Burst intervals of the new limit ... No window of the new Per holds
// more than the new To." (set against the tighter limit's "a window that
// spans the change can hold more than the new limit allows").
//
// The old limit, 10 a minute with a burst of 10, admits 10 at once and
// parks a backlog. An override loosens it to 11 a minute, burst 1 (an
// interval of 5.45 s instead of 60 s), and a worker's refresh reprices the
// parked budget a second later. Claims every second then admit under the
// new limit: the first minute, a window of the new Per, must hold at most
// the new To, 11.
func TestReviewALooserLimitKeepsTheNewToInAWindowThatSpansTheChange(t *testing.T) {
	for _, how := range []string{"reprice", "claim"} {
		t.Run(how, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				old := limits{"k": spec(t, "k", 10, time.Minute, 10)}
				looser := limits{"k": spec(t, "k", 11, time.Minute, 1)}
				var jobs []engine.NewJob
				for range 40 {
					jobs = append(jobs, limited("k", "k/a"))
				}
				enqueue(t, s, t0, jobs...)
				pid := register(t, s, t0)
				var admitted []time.Time
				res := claimLimited(t, s, pid, t0, 40, old, engine.DefaultHorizon)
				require.Len(t, res.Jobs, 10, "a quiet budget admits its burst")
				for range res.Jobs {
					admitted = append(admitted, res.DecidedAt)
				}
				require.Greater(t, budgetsByName(t, s)["k/a"].Parked, 0, "a backlog is parked")

				if how == "reprice" {
					n, err := s.Reprice(ctx, engine.At(at(time.Second)), engine.Repricing{Target: "k", Params: looser["k"].Params})
					require.NoError(t, err)
					require.Equal(t, 1, n)
				}
				// Fresh jobs keep the budget busy under the new limit.
				more := make([]engine.NewJob, 20)
				for i := range more {
					more[i] = limited("k", "k/a")
				}
				enqueue(t, s, at(time.Second), more...)
				for sec := 1; sec <= 59; sec++ {
					res := claimLimited(t, s, pid, at(time.Duration(sec)*time.Second), 1, looser, engine.DefaultHorizon)
					for range res.Jobs {
						admitted = append(admitted, res.DecidedAt)
					}
				}
				in := ratelimit.BusiestWindow(admitted, time.Minute)
				require.LessOrEqual(t, in, 11, "a window of the new Per (1m) holds %d admissions, over the new To 11: %v", in, admitted)
			})
		})
	}
}

// reviewLimits are the limits a walk switches k between.
var reviewLimits = []struct {
	to    int
	per   time.Duration
	burst int
}{{2, time.Second, 1}, {6, time.Second, 3}, {1, 2 * time.Second, 1}, {0, time.Second, 1}, {4, time.Second, 4}, {3, 500 * time.Millisecond, 2}}

// reviewAdmission is one charge of a budget, with the version of the limit
// the claim decided under.
type reviewAdmission struct {
	at      time.Time
	version int
}

// Reprice beside concurrent claims (docs/rate-limits.md, "Changing a limit"
// and "Changing a limit without a restart"): three workers, each on its own
// pool, claim from one queue whose jobs draw on one or two of four budgets
// of scope k, with backlogs parked on them, while a fourth pool reprices
// the scope whenever the limit changes (every 1.5 s of the fake clock, in
// batches of one budget, meeting the budgets the claims hold), and the
// dispatcher's promotion and unparking run between rounds. Every worker
// decides under the limit Reprice applies in that round, as after a
// refresh.
//
// Promised: no call fails (a Reprice that waits for a budget a claim
// holds, or a claim that waits for one Reprice holds, carries on); no job
// is claimed twice, and every job completes once the limit is loose; and
// under each limit no window of its Per holds more than its To on any
// budget ("At most To claims in any window of length Per", checked under
// one limit at a time, as the model test checks it).
func TestReviewRepriceBesideConcurrentClaimsLosesNothingAndKeepsTheBound(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		keys := []string{"k/a", "k/b", "k/c", "k/d"}
		var jobs []engine.NewJob
		for i := range 240 {
			j := job("k", "default", i%3)
			a, b := keys[i%4], keys[(i/4)%4]
			j.RateKeys = []engine.RateKey{{Key: a, Cost: 1}}
			if b != a && i%3 == 0 {
				if b < a {
					a, b = b, a
				}
				j.RateKeys = []engine.RateKey{{Key: a, Cost: 1}, {Key: b, Cost: 1}}
			}
			jobs = append(jobs, j)
		}
		enqueue(t, s, t0, jobs...)
		total := len(jobs)

		claimers := []*engine.Store{open(), open(), open()}
		pids := make([]int64, len(claimers))
		for i, c := range claimers {
			pids[i] = register(t, c, t0)
		}
		repricer := open()

		var mu sync.Mutex
		claimedBy := map[int64]int{}
		admits := map[string][]reviewAdmission{}
		var errs []error
		fail := func(what string, err error) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			mu.Unlock()
		}
		hints := make([][]string, len(claimers))
		limitOf := func(v int) (limits, ratelimit.Spec) {
			c := reviewLimits[v%len(reviewLimits)]
			sp := spec(t, "k", c.to, c.per, c.burst)
			return limits{"k": sp}, sp
		}
		completed, repriced := 0, 0
		round := func(step int, v int) {
			now := at(time.Duration(step) * 100 * time.Millisecond)
			lim, sp := limitOf(v)
			var wg sync.WaitGroup
			wg.Add(len(claimers) + 1)
			go func() {
				defer wg.Done()
				n, err := repricer.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: sp.Params, Batch: 1, Horizon: 2 * time.Second})
				if err != nil {
					fail("reprice", err)
				}
				mu.Lock()
				repriced += n
				mu.Unlock()
			}()
			for i, c := range claimers {
				go func() {
					defer wg.Done()
					for n := range 2 {
						res, err := c.Claim(ctx, engine.ClaimParams{
							ProcessID: pids[i], Queues: []string{"default"}, Max: 3, Clock: engine.At(now), Limits: lim,
							Horizon: 2 * time.Second, PromoteDue: (step+i+n)%2 == 0, BudgetHint: hints[i], SnapshotHint: n == 1,
						})
						if err != nil {
							fail("claim", err)
							return
						}
						hints[i] = res.Budgets
						var done []int64
						mu.Lock()
						for _, j := range res.Jobs {
							claimedBy[j.ID]++
							done = append(done, j.ID)
							for _, rk := range j.RateKeys {
								admits[rk.Key] = append(admits[rk.Key], reviewAdmission{at: res.DecidedAt, version: v})
							}
						}
						mu.Unlock()
						if len(done) == 0 {
							continue
						}
						if err := c.Finish(ctx, pids[i], engine.At(now), engine.Outcomes{Completed: done}); err != nil {
							fail("finish", err)
							return
						}
						mu.Lock()
						completed += len(done)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if _, _, err := s.Promote(ctx, engine.At(now), 500); err != nil {
				fail("promote", err)
			}
			if _, err := s.Unpark(ctx, engine.At(now), 2*time.Second, 100, 500); err != nil {
				fail("unpark", err)
			}
		}
		step := 0
		for ; step < 150; step++ {
			round(step, step/15)
		}
		// Then a limit loose enough to drain the rest (choice 4: 4 a
		// second at once, switched to only after the walk).
		last := 150/15 + len(reviewLimits) - (150/15)%len(reviewLimits) + 4
		for ; step < 2000 && func() bool { mu.Lock(); defer mu.Unlock(); return completed < total && len(errs) == 0 }(); step++ {
			round(step, last)
		}
		require.Empty(t, errs, "no call fails")
		require.Positive(t, repriced, "Reprice met parked budgets")
		t.Logf("%d budgets repriced, %d steps", repriced, step)
		for id, n := range claimedBy {
			require.Equal(t, 1, n, "job %d claimed %d times", id, n)
		}
		require.Equal(t, total, completed, "every job completes")
		for key, as := range admits {
			byVersion := map[int][]time.Time{}
			for _, a := range as {
				byVersion[a.version] = append(byVersion[a.version], a.at)
			}
			for v, times := range byVersion {
				_, sp := limitOf(v)
				require.LessOrEqual(t, ratelimit.BusiestWindow(times, sp.Per), sp.To, "budget %s under %d per %s (version %d)", key, sp.To, sp.Per, v)
			}
		}
	})
}

// waitForLockWait waits, up to 10 s, until a statement of s's database
// whose text contains marker waits for a row lock another transaction
// holds. There is no event to wait on: the database's own view of its lock
// waits is read until it shows one (on MariaDB, the InnoDB monitor's list
// of transactions, which shows a locking read's wait where INNODB_TRX may
// not).
func waitForLockWait(t *testing.T, s *engine.Store, marker string) {
	t.Helper()
	ctx := context.Background()
	waiting := func() bool {
		switch s.Dialect().Name() {
		case "postgres":
			q := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`
			rows, err := s.DB().Query(ctx, q, "%"+marker+"%")
			require.NoError(t, err)
			defer rows.Close()
			var n int64
			for rows.Next() {
				require.NoError(t, rows.Scan(&n))
			}
			return n > 0
		case "mysql":
			var db string
			rows, err := s.DB().Query(ctx, "SELECT DATABASE()")
			require.NoError(t, err)
			for rows.Next() {
				require.NoError(t, rows.Scan(&db))
			}
			rows.Close()
			rows, err = s.DB().Query(ctx, "SHOW ENGINE INNODB STATUS")
			require.NoError(t, err)
			defer rows.Close()
			for rows.Next() {
				var typ, name, status string
				require.NoError(t, rows.Scan(&typ, &name, &status))
				for _, trx := range strings.Split(status, "---TRANSACTION") {
					if strings.Contains(trx, "LOCK WAIT") && strings.Contains(trx, marker) && strings.Contains(trx, "`"+db+"`") {
						return true
					}
				}
			}
			return false
		}
		t.Fatalf("no lock waits to read on %s", s.Dialect().Name())
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if waiting() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("no statement with %q waited for a lock within 10 s", marker)
}

// count returns how many of stmts contain every one of parts.
func count(stmts []string, parts ...string) int {
	n := 0
	for _, q := range stmts {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(q, p)
		}
		if all {
			n++
		}
	}
	return n
}

// Reprice "works in transactions of at most Batch budgets, in key order"
// (reprice.go; LockRepriced: "in key order"), as every transaction that
// waits for budgets locks them: "the claim locks their budget rows (in key
// order, so overlapping limits never deadlock)" (docs/rate-limits.md).
//
// A claim holds k/a (the budget its last claim locked, its hint) and is
// about to lock k/b, which sorts after it. A worker's refresh reprices the
// scope k at that moment, and must wait for k/a without holding k/b: then
// the claim takes k/b, commits, and Reprice goes on. Each runs once, and
// neither is failed by a deadlock. The scope has a few thousand idle
// budgets besides the two with parked jobs, as a scope keyed by account
// does: MariaDB then reads LockRepriced through sluice_budgets_parked
// (parked, next_slot) and sorts the rows after locking them, so it locks
// k/b (1 parked) before k/a (2 parked), and the index entry before the
// row, which a claim that changes the row's parked count or slot cursor
// must also lock.
func TestReviewRepriceLocksTheBudgetsOfAScopeInKeyOrderBesideAClaim(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		old := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/b"), limited("k", "k/b"))
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 10, old, engine.DefaultHorizon).Jobs, 2)
		bs := budgetsByName(t, s)
		require.Equal(t, 2, bs["k/a"].Parked)
		require.Equal(t, 1, bs["k/b"].Parked)
		var idle []string
		for i := range 3000 {
			idle = append(idle, fmt.Sprintf("k/x%05d", i))
		}
		q, args := s.SQL().InsertBudgets(idle)
		_, err := s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)
		analyze := "ANALYZE"
		if s.Dialect().Name() == "mysql" {
			analyze = "ANALYZE TABLE sluice_budgets"
		}
		rows, err := s.DB().Query(ctx, analyze)
		require.NoError(t, err)
		for rows.Next() {
		}
		rows.Close()

		now := at(time.Minute)
		both := job("k", "default", 0)
		both.RateKeys = []engine.RateKey{{Key: "k/a", Cost: 1}, {Key: "k/b", Cost: 1}}
		enqueue(t, s, now, both)
		looser := limits{"k": spec(t, "k", 1, time.Second, 1)}

		rs, recR := testdb.Record(open())
		rc, recC := testdb.Record(open())
		var wg sync.WaitGroup
		var repriceErr error
		armed := true
		recC.Before = func(q string) {
			if !armed || !strings.Contains(q, "FROM sluice_budgets WHERE name") || !strings.Contains(q, "FOR UPDATE") || strings.Contains(q, "SKIP LOCKED") {
				return
			}
			// The claim holds k/a and is about to lock k/b: the refresh
			// reprices k now, and the claim goes on once it waits.
			armed = false
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, repriceErr = rs.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: looser["k"].Params})
			}()
			waitForLockWait(t, s, "interval_ns <>")
		}
		_, err = rc.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(now),
			Limits: looser, BudgetHint: []string{"k/a"}})
		wg.Wait()
		require.False(t, armed, "the claim locked k/b after its hint")
		require.NoError(t, err)
		require.NoError(t, repriceErr)
		claims := count(recC.Take(), "sluice_budgets", "SKIP LOCKED")
		reprices := count(recR.Take(), "interval_ns <>")
		require.Equal(t, 1, claims, "the claim ran once: no deadlock failed it")
		require.Equal(t, 1, reprices, "Reprice ran once: no deadlock failed it")
	})
}
