package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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

// A transaction that takes concurrency slots creates the rows its keys lack
// before it locks any of them: creating k/a while it held k/c could wait
// for another transaction that is creating k/a too and waits, in key order,
// for k/c (a deadlock PostgreSQL breaks only after a second, and which an
// enqueue in the caller's own transaction would return to the caller).
// Here the other transaction creates k/a and locks k/c at the very moment
// the enqueue creates k/a: it must not wait, and both jobs take their
// slots.
func TestAnEnqueueCreatesNoSemaphoreWhileItHoldsOneAfterIt(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("callers_transaction=%v", own), func(t *testing.T) { enqueueCreatingASemaphore(t, own) })
	}
}

func enqueueCreatingASemaphore(t *testing.T, callersTx bool) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		enqueue(t, s, t0, slotted("k/c", 5)) // k/c's row exists
		other := open()
		rs, rec := testdb.Record(s)
		var otherErr error
		created := false
		rec.Before = func(q string) {
			if created || !strings.HasPrefix(q, "INSERT INTO sluice_semaphores (name)") || !s.Dialect().Capabilities().RowLocks {
				return // SQLite: the enqueue holds the only write lock
			}
			created = true
			otherErr = createAndLockSemaphores(other, "k/a", "k/c")
		}
		got := enqueueIn(t, rs, callersTx, t0, slotted("k/c", 5), slotted("k/a", 5))
		require.Equal(t, s.Dialect().Capabilities().RowLocks, created, "the enqueue created k/a where rows are locked one by one")
		require.NoError(t, otherErr, "the other transaction waited for nothing the enqueue held")
		for _, e := range got {
			require.Equal(t, engine.StateReady, e.State)
		}
		require.Equal(t, 2, semaphore(t, s, "k/c").Held)
		require.Equal(t, 1, semaphore(t, s, "k/a").Held)
	})
}

// Enqueues in callers' own transactions, which the store cannot run again,
// each taking slots on a few keys of which some are new, never fail for a
// deadlock: every one commits, and every key counts exactly the slots its
// jobs hold.
func TestEnqueuesOfNewKeysInCallersTransactionsNeverDeadlock(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		const writers, rounds, perRound = 4, 25, 4
		stores := []*engine.Store{s}
		if s.Dialect().Capabilities().RowLocks {
			for range writers - 1 {
				stores = append(stores, open())
			}
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := stores[w%len(stores)]
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for round := range rounds {
					// The round's keys: new ones, shared by every writer,
					// and keys of earlier rounds, in any order.
					var batch []engine.NewJob
					for range perRound {
						k := fmt.Sprintf("acct/%d/%d", round, r.IntN(6))
						if r.IntN(3) == 0 && round > 0 {
							k = fmt.Sprintf("acct/%d/%d", r.IntN(round), r.IntN(6))
						}
						batch = append(batch, slotted(k, 1000))
					}
					tx, err := st.DB().Begin(ctx)
					if !assert.NoError(t, err) {
						return
					}
					if !assert.NoError(t, enqueueAndCommit(ctx, st, tx, t0, batch...), "writer %d round %d", w, round) {
						return
					}
				}
			}()
		}
		wg.Wait()
		all, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		total := 0
		for _, sem := range all {
			require.Equal(t, sem.Held, sem.Holding, sem.Name)
			total += sem.Held
		}
		require.Equal(t, writers*rounds*perRound, total, "every job took its slot once")
	})
}

// slottedLimited is a rate-limited job on budget key that also takes a
// slot of the concurrency key conc.
func slottedLimited(key, conc string) engine.NewJob {
	j := limited("k", key)
	j.Conc = &engine.Conc{Key: conc, To: 5, Duration: 3 * time.Minute}
	return j
}

// A claim that promotes a due job locks its semaphore (s/c), and then
// gives back the slot of a job it defers (s/a), which sorts before it.
// A caller's own transaction holds s/a (an EnqueueTx of a job on s/a) and
// enqueues a job on s/c meanwhile. The claim must not wait for s/a while it
// holds s/c: the two would deadlock, and the database may fail the
// caller's transaction, which sluice cannot run again. The claim runs
// again instead, locking s/a with s/c first, and the caller's transaction
// commits.
func TestAClaimGivingASlotBackNeverDeadlocksWithAnEnqueue(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 1, time.Second, 1), "q": spec(t, "q", 1, time.Minute, 1)}
		// A (r/1) and B (q/2) spend their budgets at t0; J1 (r/1, slot on
		// s/c) is deferred to t0+1s and gives its slot back.
		got := enqueue(t, s, t0, limited("k", "r/1"), limited("k", "q/2"), slottedLimited("r/1", "s/c"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 5, lim, 0)
		require.Len(t, res.Jobs, 2)
		require.Equal(t, []int64{got[2]}, deferredIDs(res))
		// J2 (q/2, slot on s/a) holds a slot; q/2 is spent for a minute.
		j2 := enqueue(t, s, t0, slottedLimited("q/2", "s/a"))[0]
		require.True(t, state(t, s, j2).HoldsSlot)

		other := open()
		tx, err := other.DB().Begin(ctx)
		require.NoError(t, err)
		_, err = other.Enqueue(ctx, tx, engine.At(at(time.Second)), []engine.NewJob{slotted("s/a", 5)})
		require.NoError(t, err, "the caller's transaction holds s/a")

		rs, rec := testdb.Record(s)
		var wg sync.WaitGroup
		var enqErr error
		armed := true
		rec.Before = func(q string) {
			if !armed || !strings.HasPrefix(q, "INSERT INTO sluice_semaphores (name,") {
				return
			}
			// The claim's promotion holds s/c and is about to save it: the
			// caller's transaction now wants s/c too.
			armed = false
			wg.Add(1)
			go func() {
				defer wg.Done()
				enqErr = enqueueAndCommit(ctx, other, tx, at(time.Second), slotted("s/c", 5))
			}()
		}
		res, err = rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5,
			Clock: engine.At(at(time.Second)), Limits: lim, PromoteDue: true})
		wg.Wait()
		require.NoError(t, err)
		require.NoError(t, enqErr, "the caller's transaction never gets a deadlock back")
		runs := 0
		for _, q := range rec.Take() {
			if isDueWaitingLock(q) {
				runs++
			}
		}
		require.Equal(t, 2, runs, "the claim tried s/a without waiting, then ran again with it")
		require.Contains(t, ids(res.Jobs), got[2], "J1 admitted at its slot")
		require.NotContains(t, ids(res.Jobs), j2)
		require.Equal(t, []int64{j2}, deferredIDs(res), "J2 deferred, its slot given back")
		require.Equal(t, 1, semaphore(t, s, "s/a").Held, "the caller's job")
		require.Equal(t, 2, semaphore(t, s, "s/c").Held, "J1 and the caller's job")
	})
}

// Semaphores are locked before budgets, waiting; after its budgets, a
// claim gives slots back without waiting, or runs again. Claim A promotes a
// due job and holds its semaphore (s/c) while it waits for the budget r/1;
// claim B holds r/1 and defers a job holding a slot on s/c. Were B to wait
// for s/c, the two would deadlock, and the database would fail one after
// its deadlock timeout (a second on PostgreSQL). B runs again instead,
// locking s/c first, after A.
func TestClaimsNeverDeadlockOnASemaphoreAndABudget(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		a := setUpClaimA(t, s, open)
		j3 := enqueue(t, s, t0, slottedLimited("r/1", "s/c"))[0] // holds a slot on s/c
		require.True(t, state(t, s, j3).HoldsSlot)

		// B holds r/1 when it is about to give J3's slot on s/c back.
		rb, recB := testdb.Record(s)
		recB.Before = a.startBefore(t, "sluice_semaphores")
		resB, err := rb.Claim(context.Background(), engine.ClaimParams{ProcessID: a.pid, Queues: []string{"default"}, Max: 5,
			Clock: engine.At(at(500 * time.Millisecond)), Limits: a.lim})
		require.NoError(t, err)
		resA := a.wait(t)
		// B tried s/c without waiting, and then ran again locking it
		// before r/1 (rather than being the one a deadlock failed).
		stmts := recB.Take()
		tried := slices.IndexFunc(stmts, func(q string) bool { return isSemaphoreLock(q) && strings.Contains(q, "SKIP LOCKED") })
		require.NotEqual(t, -1, tried, "B gave J3's slot back without waiting")
		rerun := stmts[tried+1:]
		sem := slices.IndexFunc(rerun, isSemaphoreLock)
		require.NotEqual(t, -1, sem, "B's second run locks s/c first")
		if budget := slices.IndexFunc(rerun, isBudgetLock); budget != -1 {
			require.Less(t, sem, budget, "B's second run locks s/c before r/1")
		}
		require.Empty(t, resB.Jobs)
		require.Equal(t, []int64{j3}, append(deferredIDs(resA), deferredIDs(resB)...),
			"J3 deferred once (by A, which found it free when B ran again), its slot given back")
		require.False(t, state(t, s, j3).HoldsSlot)
		require.Equal(t, 1, semaphore(t, s, "s/c").Held, "J1's")
	})
}

// Recording outcomes locks semaphores before budgets too: a finish that
// gives a slot back on s/c and holds the budget r/1 back after a 429 does
// not hold r/1 while it waits for s/c, which a claim promoting a job on s/c
// holds while it waits for r/1.
func TestAFinishNeverDeadlocksWithAClaim(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		a := setUpClaimA(t, s, open)
		j3 := enqueue(t, s, t0, slotted("s/c", 5))[0]
		require.Equal(t, []int64{j3}, ids(claimLimited(t, s, a.pid, t0, 5, a.lim, 0).Jobs), "J3 runs, holding a slot on s/c")

		// The finish is about to give J3's slot on s/c back.
		run := runs(t, s, j3)
		rf, recF := testdb.Record(s)
		recF.Before = a.startBefore(t, "sluice_semaphores")
		err := rf.Finish(context.Background(), a.pid, engine.At(at(time.Second)), engine.Outcomes{Completed: run, SlotHolders: run,
			Pushes: []engine.BudgetPush{{Key: "r/1", Wait: time.Minute, Params: a.lim["r"].Params, Run: run[0]}}})
		require.NoError(t, err)
		resA := a.wait(t)
		stmts := recF.Take()
		sem, budget := slices.IndexFunc(stmts, isSemaphoreLock), slices.IndexFunc(stmts, isBudgetLock)
		require.NotEqual(t, -1, budget)
		require.Less(t, sem, budget, "the finish locks s/c before r/1, and ran once")
		require.Equal(t, -1, slices.IndexFunc(stmts[budget+1:], isBudgetLock), "the finish ran once")
		require.Empty(t, resA.Deferred, "A ran before the push")
		require.Equal(t, engine.StateCompleted, state(t, s, j3).State)
		require.Equal(t, 1, semaphore(t, s, "s/c").Held, "J1's")
	})
}

// claimA is the claim the two tests above interleave with, on a pool of
// its own: at t0+1s it promotes J1, a job on the budget r/1 that waits for
// a slot on s/c, locks s/c, and then locks r/1.
type claimA struct {
	s     *engine.Store
	rec   *testdb.Recorder
	pid   int64
	j1    int64
	lim   limits
	holds chan struct{}
	wg    sync.WaitGroup
	res   *engine.ClaimResult
	err   error
}

// setUpClaimA enqueues X and J1 on r/1 (1 a second, burst 1), J1 with a
// slot on s/c, and claims at t0: X spends r/1, and J1 is deferred to t0+1s
// and gives its slot back.
func setUpClaimA(t *testing.T, s *engine.Store, open func() *engine.Store) *claimA {
	a := &claimA{lim: limits{"r": spec(t, "r", 1, time.Second, 1)}, holds: make(chan struct{})}
	got := enqueue(t, s, t0, limited("k", "r/1"), slottedLimited("r/1", "s/c"))
	a.pid, a.j1 = register(t, s, t0), got[1]
	require.Equal(t, []int64{a.j1}, deferredIDs(claimLimited(t, s, a.pid, t0, 5, a.lim, 0)))
	a.s, a.rec = testdb.Record(open())
	a.rec.Before = func(q string) {
		if strings.HasPrefix(q, "INSERT INTO sluice_semaphores (name,") {
			select {
			case <-a.holds:
			default:
				close(a.holds) // its promotion holds s/c and saves it
			}
		}
	}
	return a
}

// startBefore returns a Recorder.Before that, before the first statement
// on table, runs claim A in a goroutine and returns once it holds s/c.
func (a *claimA) startBefore(t *testing.T, table string) func(q string) {
	armed := true
	return func(q string) {
		if !armed || !strings.Contains(q, table) {
			return
		}
		armed = false
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.res, a.err = a.s.Claim(context.Background(), engine.ClaimParams{ProcessID: a.pid, Queues: []string{"default"}, Max: 5,
				Clock: engine.At(at(time.Second)), Limits: a.lim, PromoteDue: true})
		}()
		select {
		case <-a.holds:
		case <-time.After(10 * time.Second):
			t.Error("claim A never locked s/c")
		}
	}
}

// wait waits for claim A, checks that it ran once (no deadlock failed it)
// and admitted J1 at its slot, and returns its result.
func (a *claimA) wait(t *testing.T) *engine.ClaimResult {
	a.wg.Wait()
	require.NoError(t, a.err)
	runs := 0
	for _, q := range a.rec.Take() {
		if isDueWaitingLock(q) {
			runs++
		}
	}
	require.Equal(t, 1, runs, "claim A ran once: no deadlock failed it")
	require.Equal(t, []int64{a.j1}, ids(a.res.Jobs), "A admits J1 at its slot")
	return a.res
}

// The dispatcher's upkeep of semaphores locks the keys it frees and the
// keys it unblocks together, in key order: it used to lock the expired
// ones first (s/z) and then wait for the others (s/a), so a caller's
// transaction holding s/a and enqueueing on s/z deadlocked with it. An
// expired key that some transaction touched meanwhile is no longer freed.
func TestSemaphoreUpkeepNeverDeadlocksWithAnEnqueue(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		enqueue(t, s, t0, slotted("s/z", 5)) // its slot expires at t0+3m
		onA := enqueue(t, s, t0, slotted("s/a", 1), slotted("s/a", 1))
		require.Equal(t, engine.StateBlocked, state(t, s, onA[1]).State)
		// s/a has a free slot and a blocked job, as after a race the
		// upkeep is there to mend.
		for _, q := range []string{"UPDATE sluice_semaphores SET held = 0 WHERE name = 's/a'",
			fmt.Sprintf("UPDATE sluice_jobs SET holds_slot = FALSE WHERE id = %d", onA[0])} {
			_, err := s.DB().Exec(ctx, q)
			require.NoError(t, err)
		}
		later := at(4 * time.Minute)

		other := open()
		tx, err := other.DB().Begin(ctx)
		require.NoError(t, err)
		_, err = other.Enqueue(ctx, tx, engine.At(later), []engine.NewJob{slotted("s/a", 1)})
		require.NoError(t, err, "the caller's transaction holds s/a")

		rs, rec := testdb.Record(s)
		var wg sync.WaitGroup
		var enqErr error
		seen := 0
		rec.Before = func(q string) {
			if !strings.Contains(q, "sluice_semaphores") {
				return
			}
			if seen++; seen != 3 {
				return
			}
			// The upkeep read the expired and the blocked keys, and is
			// about to lock them: the caller's transaction wants s/z.
			wg.Add(1)
			go func() {
				defer wg.Done()
				enqErr = enqueueAndCommit(ctx, other, tx, later, slotted("s/z", 5))
			}()
		}
		freed, unblocked, err := rs.MaintainSemaphores(ctx, engine.At(later), 10)
		wg.Wait()
		require.NoError(t, err)
		require.NoError(t, enqErr, "the caller's transaction never gets a deadlock back")
		runs := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "expires_at <") {
				runs++
			}
		}
		require.Equal(t, 1, runs, "the upkeep ran once: no deadlock failed it")
		require.Zero(t, freed, "s/z was touched by the enqueue: its slots are not lost")
		require.Zero(t, unblocked, "the enqueue took s/a's free slot")
		require.Equal(t, 2, semaphore(t, s, "s/z").Held)
		require.Equal(t, 1, semaphore(t, s, "s/a").Held)
	})
}

// enqueueAndCommit enqueues jobs in the caller's transaction tx and
// commits it, or rolls it back and returns the enqueue's error.
func enqueueAndCommit(ctx context.Context, s *engine.Store, tx engine.Tx, now time.Time, jobs ...engine.NewJob) error {
	if _, err := s.Enqueue(ctx, tx, engine.At(now), jobs); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// createAndLockSemaphores creates the semaphore row create and locks the
// row lock in one transaction of s, giving up after 10 s: a test whose
// other transaction would wait for it forever fails instead of hanging.
func createAndLockSemaphores(s *engine.Store, create, lock string) error {
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return createAndLockRows(wait, s, s.SQL().InsertSemaphores, s.SQL().LockSemaphores, create, lock)
}

// enqueueIn enqueues jobs at now in a caller's transaction that it then
// commits, or in the store's own, and returns what the enqueue reported.
func enqueueIn(t *testing.T, s *engine.Store, callersTx bool, now time.Time, jobs ...engine.NewJob) []engine.Enqueued {
	t.Helper()
	ctx := context.Background()
	var ex engine.Executor
	var tx engine.Tx
	if callersTx {
		var err error
		tx, err = s.DB().Begin(ctx)
		require.NoError(t, err)
		ex = tx
	}
	got, err := s.Enqueue(ctx, ex, engine.At(now), jobs)
	require.NoError(t, err)
	if tx != nil {
		require.NoError(t, tx.Commit(ctx))
	}
	return got
}

// isSemaphoreLock and isBudgetLock say whether a statement locks
// semaphores or budgets by name.
func isSemaphoreLock(q string) bool {
	return strings.Contains(q, "FROM sluice_semaphores WHERE name ") && strings.Contains(q, "FOR UPDATE")
}

// isDueWaitingLock says whether q is a claim's lock of the due jobs that
// wait on a rate limit (LockDueWaiting): once per run of a claim that
// promotes them.
func isDueWaitingLock(q string) bool {
	return strings.Contains(q, "AND j.wait_key IS NOT NULL AND j.queue ")
}

func isBudgetLock(q string) bool {
	return strings.Contains(q, "FROM sluice_budgets WHERE name ") && strings.Contains(q, "FOR UPDATE")
}

func deferredIDs(res *engine.ClaimResult) []int64 {
	var out []int64
	for _, d := range res.Deferred {
		out = append(out, d.JobID)
	}
	return out
}

// A call that fills a waiting coalesced job that dispatches once full makes
// it ready in the enqueue's transaction, taking a slot on its semaphore
// (s/b). The enqueue locks that semaphore with those of the jobs ready on
// arrival (s/a), all at once in key order: it used to lock s/b as it
// joined the call, then s/a, so a transaction that took s/a and then
// wanted s/b deadlocked with it. The job's state is reported as the
// promotion left it: ready with a slot, or blocked when none is free.
func TestAnEnqueueLocksADispatchedJobsSemaphoreWithTheOthers(t *testing.T) {
	for _, c := range []struct {
		name      string
		callersTx bool
		full      bool
	}{{"store", false, false}, {"callers_transaction", true, false}, {"no_free_slot", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
				enqueueDispatchingAFullJob(t, s, open, c.callersTx, c.full)
			})
		})
	}
}

func enqueueDispatchingAFullJob(t *testing.T, s *engine.Store, open func() *engine.Store, callersTx, full bool) {
	rowLocks := s.Dialect().Capabilities().RowLocks
	// s/b's row exists (a transaction that has not committed its creation
	// locks nothing on PostgreSQL), and one job holds a slot; with full,
	// its only slot.
	to := 5
	if full {
		to = 1
	}
	enqueue(t, s, t0, slotted("s/b", to))
	collect := func() engine.NewJob {
		j := slotted("s/b", to)
		j.Coalesce = &engine.Coalesce{Key: "co/x", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect,
			MaxCalls: 2, Dispatch: true, Debounce: time.Minute}}
		return j
	}
	pending := enqueue(t, s, t0, collect())[0]
	require.Equal(t, engine.StateScheduled, state(t, s, pending).State, "the first call waits out its debounce")

	other := open()
	rs, rec := testdb.Record(s)
	var otherErr error
	locked, fired := false, false
	rec.Before = func(q string) {
		if !rowLocks {
			return // SQLite: the enqueue holds the only write lock
		}
		if isSemaphoreLock(q) {
			locked = true
		}
		if !locked || fired || !strings.HasPrefix(q, "INSERT INTO sluice_semaphores (name)") {
			return
		}
		// The enqueue holds a semaphore and creates another: the other
		// transaction takes s/a, then wants s/b.
		fired = true
		otherErr = createAndLockSemaphores(other, "s/a", "s/b")
	}
	got := enqueueIn(t, rs, callersTx, at(time.Second), collect(), slotted("s/a", 5))
	if rowLocks {
		locks := 0
		for _, q := range rec.Take() {
			if isSemaphoreLock(q) {
				locks++
			}
		}
		require.Equal(t, 1, locks, "the enqueue locked its semaphores in one statement")
	}
	require.False(t, fired, "the enqueue never created a semaphore while it held one")
	require.NoError(t, otherErr)

	require.Equal(t, pending, got[0].ID, "the second call joined the pending job")
	require.Equal(t, engine.StateReady, got[1].State)
	require.True(t, state(t, s, got[1].ID).HoldsSlot)
	dispatched := state(t, s, pending)
	if full {
		require.Equal(t, engine.StateBlocked, got[0].State, "no slot free on s/b")
		require.Equal(t, engine.StateBlocked, dispatched.State)
		require.False(t, dispatched.HoldsSlot)
		require.Equal(t, 1, semaphore(t, s, "s/b").Held, "the job that held it")
	} else {
		require.Equal(t, engine.StateReady, got[0].State, "the full job is dispatched")
		require.Equal(t, engine.StateReady, dispatched.State)
		require.True(t, dispatched.HoldsSlot)
		require.Equal(t, 2, semaphore(t, s, "s/b").Held)
	}
	require.Equal(t, 1, semaphore(t, s, "s/a").Held)
}
