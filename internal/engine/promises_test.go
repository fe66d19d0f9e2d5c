package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Regression tests for the defects a review found, each a sentence of
// docs/guarantees.md that did not hold.

// holdLocked begins a transaction on another pool that locks the rows the
// statement selects (FOR UPDATE) and returns the function that releases
// them. SQLite has one writer: a transaction holding a lock there blocks
// every other writer, so nothing can be locked while another transaction
// works, and holdLocked reports false.
func holdLocked(t *testing.T, other *engine.Store, q string, args []any) (release func(), ok bool) {
	t.Helper()
	if other.Dialect().Name() == "sqlite" {
		return func() {}, false
	}
	ctx := context.Background()
	tx, err := other.DB().Begin(ctx)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, q, args...)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	require.NoError(t, rows.Err())
	require.Positive(t, n, "nothing to lock")
	return func() { require.NoError(t, tx.Rollback(ctx)) }, true
}

func budgetNamed(t *testing.T, s *engine.Store, name string) engine.BudgetInfo {
	t.Helper()
	bs, err := s.ListBudgets(context.Background())
	require.NoError(t, err)
	for _, b := range bs {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no budget %s in %+v", name, bs)
	return engine.BudgetInfo{}
}

// A parked job another transaction holds locked while the dispatcher
// unparks (a coalescing call joining it, a caller's EnqueueTx, an
// operator) used to zero its budget's parked count, and nothing unparked
// it again.
func TestAParkedJobLockedDuringUnparkIsUnparkedLater(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		const horizon = 2 * time.Minute
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 4, lim, horizon)
		require.Len(t, res.Jobs, 1)
		require.Equal(t, engine.StateParked, state(t, s, got[3]).State, "slots at 1 and 2 minutes; the third parks")
		require.Equal(t, 1, budgetNamed(t, s, "k/x").Parked)

		other := open()
		q, args := other.SQL().LockJob(got[3])
		release, locked := holdLocked(t, other, q, args)
		if locked {
			n, err := s.Unpark(ctx, engine.At(at(time.Minute)), horizon, 100, 0)
			require.NoError(t, err)
			require.Zero(t, n, "the only parked job is locked elsewhere")
			require.Equal(t, 1, budgetNamed(t, s, "k/x").Parked, "the count still knows of it")
		}
		release()
		n, err := s.Unpark(ctx, engine.At(at(time.Minute)), horizon, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		j := state(t, s, got[3])
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, at(3*time.Minute), j.RunAt)
		require.Zero(t, budgetNamed(t, s, "k/x").Parked)
	})
}

// A count that ran ahead of the parked jobs (a full coalescing call
// dispatched one: here the count is raised by hand) is brought back to
// the truth, never below it. An operator's cancel takes its job off the
// count.
func TestAParkedCountThatRanAheadIsCorrected(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		claimLimited(t, s, pid, t0, 4, lim, time.Minute) // one runs, one slot, two park
		require.Equal(t, 2, budgetNamed(t, s, "k/x").Parked)
		_, err := s.CancelJobs(ctx, engine.At(t0), got[2:3], "")
		require.NoError(t, err)
		require.Equal(t, 1, budgetNamed(t, s, "k/x").Parked, "the cancel takes its job off the count")
		_, err = s.DB().Exec(ctx, "UPDATE sluice_budgets SET parked = parked + 1 WHERE name = 'k/x'")
		require.NoError(t, err)
		require.Equal(t, 2, budgetNamed(t, s, "k/x").Parked, "the count runs ahead")
		n, err := s.Unpark(ctx, engine.At(at(time.Minute)), time.Minute, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, engine.StateScheduled, state(t, s, got[3]).State)
		require.GreaterOrEqual(t, budgetNamed(t, s, "k/x").Parked, 0)
		// The next round finds no parked job where the count says one is,
		// counts again, and corrects it.
		_, err = s.Unpark(ctx, engine.At(at(2*time.Minute)), time.Minute, 100, 0)
		require.NoError(t, err)
		require.Zero(t, budgetNamed(t, s, "k/x").Parked)
	})
}

// Unparking spaces the slots it hands out by each job's cost.
func TestUnparkingSpacesSlotsByCost(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 5, 3*time.Minute, 3)} // T = 1 minute, burst 3
		costly := func(c int) engine.NewJob {
			j := job("k", "default", 0)
			j.RateKeys = []engine.RateKey{{Key: "k/x", Cost: c}}
			return j
		}
		got := enqueue(t, s, t0, costly(3), costly(3), costly(2), costly(1))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 4, lim, time.Second)
		require.Len(t, res.Jobs, 1, "the burst pays for the first")
		for _, d := range res.Deferred {
			require.True(t, d.Parked, "the horizon is one second: every slot lies past it")
		}
		n, err := s.Unpark(ctx, engine.At(at(3*time.Minute)), 10*time.Minute, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		// The budget admits its next cost-3 job at 3 minutes (three
		// intervals after the burst); each slot is then as many intervals
		// wide as the job before it cost.
		require.Equal(t, at(3*time.Minute), state(t, s, got[1]).RunAt)
		require.Equal(t, at(6*time.Minute), state(t, s, got[2]).RunAt)
		require.Equal(t, at(8*time.Minute), state(t, s, got[3]).RunAt)
	})
}

// Lowering a concurrency limit never takes a slot from a holder, and no
// slot is handed out until the holders are below the new limit.
func TestALoweredConcurrencyLimitDrainsBeforeANewGrant(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("a", 2), slotted("a", 2))
		pid := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 2).Jobs, 2)
		lower := enqueue(t, s, t0, slotted("a", 1), slotted("a", 1))
		require.Equal(t, engine.StateBlocked, state(t, s, lower[0]).State)
		sem := semaphore(t, s, "a")
		require.Equal(t, 2, sem.Held)
		require.Equal(t, 1, sem.Limit)

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runs(t, s, got[:1]...), SlotHolders: runs(t, s, got[:1]...)}))
		require.Equal(t, engine.StateBlocked, state(t, s, lower[0]).State, "one holder is still out: To 1 is full")
		require.Equal(t, 1, semaphore(t, s, "a").Held)

		// The review's case: the slow holder's slot expires and is
		// handed on; the slow holder then finishes, and must not hand out
		// a second slot.
		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Second+3*time.Minute+time.Millisecond)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, lower[0]).State)
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(4*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[1:2]...), SlotHolders: runs(t, s, got[1:2]...)}))
		require.Equal(t, engine.StateBlocked, state(t, s, lower[1]).State, "the late finisher gives nothing back")
		sem = semaphore(t, s, "a")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Holding)
	})
}

// A transaction that is retried after a deadlock starts from the rows as
// they were checked: the review's case inserted a job blocked while
// holding a slot, two holders for To 1.
func TestARetriedEnqueueStartsFromFreshInputs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		// How many statements one slotted enqueue runs, commit included
		// (the first enqueue also reads the schema's version).
		enqueue(t, s, t0, slotted("probe", 1))
		before := faults.Count()
		enqueue(t, s, t0, slotted("probe", 1))
		n := faults.Count() - before
		require.Greater(t, n, 2)
		for k := 1; k <= n; k++ {
			key := "k" + strings.Repeat("x", k)
			// Between the failed attempt and the retry, another process
			// takes the key's only slot: the retry must block the job, and
			// not keep the slot the failed attempt took.
			var other []int64
			faults.BeforeRetry = func() { other = enqueue(t, base, t0, slotted(key, 1)) }
			faults.FailAt(k)
			retried := enqueue(t, s, t0, slotted(key, 1))[0]
			require.False(t, faults.Pending(), "the fault at statement %d fired", k)
			require.Len(t, other, 1, "fault at %d", k)
			j := state(t, s, other[0])
			require.Equal(t, engine.StateReady, j.State, "fault at %d", k)
			require.True(t, j.HoldsSlot, "fault at %d", k)
			j = state(t, s, retried)
			require.Equal(t, engine.StateBlocked, j.State, "fault at %d", k)
			require.False(t, j.HoldsSlot, "fault at %d", k)
			sem := semaphore(t, s, key)
			require.Equal(t, 1, sem.Held, "fault at %d", k)
			require.Equal(t, 1, sem.Holding, "fault at %d", k)
			_, err := s.CancelJobs(ctx, engine.At(t0), []int64{retried}, "")
			require.NoError(t, err)
			require.Equal(t, 1, semaphore(t, s, key).Held, "cancelling a blocked job gives back nothing (fault at %d)", k)
		}
	})
}

// A job whose cost its limit can no longer admit (an override lowered the
// burst) fails at once with a clear error, and leaves the budget's slots
// as they were; it used to probe every horizon forever and push every
// other job of its budget back by the horizon.
func TestAJobThatCanNeverBeAdmittedFailsAndLeavesTheCursor(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, 10*time.Second, 5)}
		pid := register(t, s, t0)
		costly := job("k", "default", 0)
		costly.RateKeys = []engine.RateKey{{Key: "k/x", Cost: 5}}
		got := enqueue(t, s, t0, limited("k", "k/x"), costly, limited("k", "k/x"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1)
		cursor := budgetNamed(t, s, "k/x").NextSlot

		lim["k"] = spec(t, "k", 10, 10*time.Second, 2) // an override lowers the burst below the cost
		res := claimLimited(t, s, pid, at(time.Minute), 5, lim, 0)
		require.Equal(t, []int64{got[2]}, ids(res.Jobs), "the cost-1 job behind it is admitted as usual")
		require.Len(t, res.Unfit, 1)
		require.Equal(t, engine.Unfit{JobID: got[1], Kind: "k", Key: "k/x", Cost: 5, Burst: 2}, res.Unfit[0])
		j := state(t, s, got[1])
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "costs 5, more than the burst of 2")
		require.Equal(t, cursor, budgetNamed(t, s, "k/x").NextSlot, "the slot cursor is untouched")
	})
}

// Stored times are compared with the clock that wrote them: a host 2 s
// ahead of the database does not clear a budget the database still
// counts, forgive its debt, promote a job early, or decide a claim on its
// own clock.
func TestAHostAheadOfTheDatabaseDecidesOnTheDatabasesClock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		dbNow := t0
		s := testdb.WithDatabaseClock(base, func() time.Time { return dbNow })
		host := func() time.Time { return dbNow.Add(2 * time.Second) }
		c := engine.DatabaseTime(host)
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, c)
		require.NoError(t, err)

		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"))
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: c, Limits: lim})
		require.NoError(t, err)
		require.Equal(t, t0, res.DecidedAt, "the claim decided on the database's clock")
		require.Len(t, res.Jobs, 1)
		require.Equal(t, at(time.Second), res.Deferred[0].Until, "its slot is one interval after the database's now")

		dbNow = at(time.Second / 2) // the host reads 2.5 s
		n, _, err := s.Promote(ctx, c, 10)
		require.NoError(t, err)
		require.Zero(t, n, "due at 1 s on the database's clock: not yet, whatever the host says")
		cleared, err := s.ClearIdleBudgets(ctx, c, 10, 0)
		require.NoError(t, err)
		require.Zero(t, cleared, "the budget still owes until 1 s on the database's clock")
		require.Equal(t, engine.StateScheduled, state(t, s, got[1]).State)

		dbNow = at(time.Second)
		n, _, err = s.Promote(ctx, c, 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// Heartbeats are stamped and compared on the database's clock too:
		// a process is not presumed dead because its host runs behind.
		procs, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.Micros(t0), procs[0].HeartbeatAt)
	})
}

// EnqueueMany writes all of its jobs or none, across insert batches, and a
// job the database refuses is named. The batches are of 100 jobs
// (smallBatches) and the refused job is in the fifth: the four before it
// were inserted, in the same transaction, when it failed.
func TestEnqueueManyIsAllOrNothingAcrossBatches(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		const batch, n = 100, 500
		s, faults, log := smallBatches(t, base, batch)
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = job("bulk", "default", 0)
		}
		jobs[n-2].Args = []byte(`{"x":"POISON"}`)
		faults.Poison = "POISON"
		_, err := s.Enqueue(ctx, nil, engine.At(t0), jobs)
		require.ErrorContains(t, err, "job 498 (bulk)")
		require.ErrorContains(t, err, "injected refusal")
		// The first inserts were the batches in order, the refused job in
		// the last of them (blame's probes follow).
		inserts := log.binds("INSERT INTO sluice_jobs", `{"x":"POISON"}`)
		require.Greater(t, len(inserts), n/batch)
		require.Equal(t, []int{0, 0, 0, 0, 1}, inserts[:n/batch], "the refused job was in the fifth batch")
		stats, err := base.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats, "nothing was written")

		faults.Poison = ""
		log.reset()
		res, err := s.Enqueue(ctx, nil, engine.At(t0), jobs)
		require.NoError(t, err)
		require.Len(t, res, n)
		require.Equal(t, n/batch, log.count("INSERT INTO sluice_jobs"))
	})
}

// Clearing idle budgets skips a budget a claim holds locked instead of
// waiting for it (MySQL's delete did not skip locked rows).
func TestClearingIdleBudgetsSkipsLockedBudgets(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"))
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 2, lim, 0).Jobs, 2)
		other := open()
		q, args := other.SQL().LockBudgets([]string{"k/a"})
		release, locked := holdLocked(t, other, q, args)
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := s.ClearIdleBudgets(ctx, engine.At(at(time.Minute)), 10, 0)
		require.NoError(t, err, "it did not wait for the locked budget")
		release()
		if locked {
			require.Equal(t, 1, n)
			budgetNamed(t, s, "k/a")
		} else {
			require.Equal(t, 2, n)
		}
	})
}

// A claim with PromoteDue takes the due jobs of its queues that wait on a
// rate limit, and only those: the dispatcher's tick is not what paces a
// backlog.
func TestAClaimTakesTheDueWaitingJobsOfItsQueues(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		other := limited("k", "k/y")
		other.Queue = "other"
		delayed := job("plain", "default", 0)
		delayed.RunAt = at(time.Second)
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), other, delayed)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, 0)
		require.Equal(t, []int64{got[0]}, ids(res.Jobs))
		require.Equal(t, at(time.Second), res.Deferred[0].Until)

		claimDue := func(now time.Time, lead time.Duration) *engine.ClaimResult {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(now),
				Limits: lim, PromoteDue: true, DueLead: lead})
			require.NoError(t, err)
			return res
		}
		res = claimDue(at(time.Second-time.Millisecond), 0)
		require.Zero(t, res.Promoted, "not due yet")
		require.Equal(t, at(time.Second-time.Millisecond), res.DueAt)
		res = claimDue(at(time.Second-time.Millisecond), 2*time.Millisecond)
		require.Equal(t, 1, res.Promoted, "due within the lead")
		require.Empty(t, res.Jobs, "on the caller's clock the claim does not wait: one ms early is denied")
		require.Equal(t, at(time.Second), res.Deferred[0].Until, "and it keeps its slot at the head of the line")
		res = claimDue(at(time.Second), 0)
		require.Equal(t, 1, res.Promoted)
		require.Equal(t, []int64{got[1]}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, got[3]).State, "a delayed job is the dispatcher's to promote")
	})
}

// A job that comes back for its slot and finds the budget not quite ready
// (the admission before it came late) keeps its place: its new slot is
// the time it can be admitted, not the back of the line.
func TestAReturningJobKeepsItsPlace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 4, lim, time.Minute)
		require.Len(t, res.Jobs, 1)
		require.Equal(t, []time.Time{at(time.Second), at(2 * time.Second), at(3 * time.Second)},
			[]time.Time{res.Deferred[0].Until, res.Deferred[1].Until, res.Deferred[2].Until})
		// The first comes back 300 ms late; the second, on time, finds the
		// budget owing until 2.3 s.
		_, _, err := s.Promote(ctx, engine.At(at(1300*time.Millisecond)), 10)
		require.NoError(t, err)
		require.Equal(t, []int64{got[1]}, ids(claimLimited(t, s, pid, at(1300*time.Millisecond), 4, lim, time.Minute).Jobs))
		_, _, err = s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(2*time.Second), 4, lim, time.Minute)
		require.Empty(t, res.Jobs)
		require.Equal(t, got[2], res.Deferred[0].JobID)
		require.Equal(t, at(2300*time.Millisecond), res.Deferred[0].Until, "not 4 s, behind the others")
	})
}

// sixSlottedOneASecond enqueues six jobs on one budget of one a second,
// burst 1, and claims them at t0: the first runs, the others get slots at
// 1 s to 5 s. It then promotes the jobs due at 3.5 s, those slotted at 1, 2
// and 3 s, and returns the limit, the jobs and the claiming process.
func sixSlottedOneASecond(t *testing.T, s *engine.Store) (limits, []int64, int64) {
	t.Helper()
	lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
	got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"),
		limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
	pid := register(t, s, t0)
	res := claimLimited(t, s, pid, t0, 6, lim, time.Minute)
	require.Len(t, res.Jobs, 1)
	require.Len(t, res.Deferred, 5, "slots at 1 s to 5 s")
	_, _, err := s.Promote(context.Background(), engine.At(at(3500*time.Millisecond)), 10)
	require.NoError(t, err)
	return lim, got, pid
}

// A job that comes back for its slot and finds the budget spent keeps the
// head of the line when the budget can take it within one cost of its
// slot (the admission before it came a moment late). Further past its
// slot, the budget has slipped over the slots of the jobs behind it: it
// takes the next free slot, at the back, instead of the slot of a job
// behind it.
func TestAReturningJobKeepsTheHeadOfTheLineOnlyWithinOneCost(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim, got, pid := sixSlottedOneASecond(t, s)
		// The jobs slotted at 1, 2 and 3 s come back together at 3.5 s: the
		// first is admitted, and the budget's next admission, at 4.5 s, is
		// more than one interval past the others' slots.
		res := claimLimited(t, s, pid, at(3500*time.Millisecond), 6, lim, time.Minute)
		require.Equal(t, []int64{got[1]}, ids(res.Jobs))
		require.Len(t, res.Deferred, 2)
		require.Equal(t, []int64{got[2], got[3]}, []int64{res.Deferred[0].JobID, res.Deferred[1].JobID}, "in their order")
		require.Equal(t, []time.Time{at(6 * time.Second), at(7 * time.Second)},
			[]time.Time{res.Deferred[0].Until, res.Deferred[1].Until}, "the next free slots")
		// The job slotted at 4 s finds the budget half an interval away: it
		// keeps the head of the line, at the time it can be admitted.
		_, _, err := s.Promote(ctx, engine.At(at(4*time.Second)), 10)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(4*time.Second), 6, lim, time.Minute)
		require.Empty(t, res.Jobs)
		require.Len(t, res.Deferred, 1)
		require.Equal(t, got[4], res.Deferred[0].JobID)
		require.Equal(t, at(4500*time.Millisecond), res.Deferred[0].Until)
	})
}

// A returning job that goes to the back (its budget slipped more than one
// cost past its slot) parks when the back lies past the horizon, and gets
// a slot again, in its turn, once the horizon reaches it: nothing is lost,
// and the jobs keep their order.
func TestAReturningJobSentToTheBackParksPastTheHorizon(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim, got, pid := sixSlottedOneASecond(t, s)
		// The jobs slotted at 1, 2 and 3 s come back together at 3.5 s:
		// the first is admitted, and the budget's next free slot, at 6 s,
		// lies past a 2 s horizon.
		res := claimLimited(t, s, pid, at(3500*time.Millisecond), 6, lim, 2*time.Second)
		require.Equal(t, []int64{got[1]}, ids(res.Jobs))
		require.Len(t, res.Deferred, 2)
		for i, d := range res.Deferred {
			require.Equal(t, got[2+i], d.JobID, "in their order")
			require.True(t, d.Parked, "the back is past the horizon")
			require.True(t, d.Until.IsZero())
			info, err := s.GetJob(ctx, d.JobID)
			require.NoError(t, err)
			require.Equal(t, engine.StateParked, info.State)
		}
		// At 4.5 s the horizon reaches 6.5 s: the first parked job gets the
		// next free slot, 6 s; the second waits until the horizon passes 7 s.
		n, err := s.Unpark(ctx, engine.At(at(4500*time.Millisecond)), 2*time.Second, 10, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		first, err := s.GetJob(ctx, got[2])
		require.NoError(t, err)
		require.Equal(t, engine.StateScheduled, first.State)
		require.Equal(t, at(6*time.Second), first.RunAt)
		n, err = s.Unpark(ctx, engine.At(at(5500*time.Millisecond)), 2*time.Second, 10, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		second, err := s.GetJob(ctx, got[3])
		require.NoError(t, err)
		require.Equal(t, at(7*time.Second), second.RunAt)
		// Every job is then admitted once, one a second at most.
		ran := []int64{got[0], got[1]}
		for sec := 4; sec <= 9; sec++ {
			now := at(time.Duration(sec) * time.Second)
			_, _, err := s.Promote(ctx, engine.At(now), 10)
			require.NoError(t, err)
			res := claimLimited(t, s, pid, now, 6, lim, 2*time.Second)
			require.LessOrEqual(t, len(res.Jobs), 1, "at %d s", sec)
			ran = append(ran, ids(res.Jobs)...)
		}
		require.ElementsMatch(t, got, ran)
		require.Less(t, slices.Index(ran, got[2]), slices.Index(ran, got[3]), "the parked ones in their order: %v", ran)
	})
}

// On the database's clock, a claim that takes a waiting job a moment
// before its slot admits it as of the slot, and holds it until then.
func TestAClaimAdmitsAnImminentSlotAsOfIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, 40*time.Millisecond, 1)}
		got := enqueue(t, s, time.Now(), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, time.Now())
		res := claimOnDatabaseClock(t, s, pid, lim, 2, 0)
		require.Len(t, res.Jobs, 1)
		slot := res.Deferred[0].Until
		res = claimOnDatabaseClock(t, s, pid, lim, 2, time.Second)
		require.Equal(t, []int64{got[1]}, ids(res.Jobs), "admitted at its slot, within the lead")
		require.False(t, res.DecidedAt.Before(slot), "decided at %s, slot %s: never early", res.DecidedAt, slot)
		j := res.Jobs[0]
		require.Equal(t, res.DecidedAt, j.ClaimedAt, "its claim time is the time decided as of")
		if res.Ahead > 0 {
			require.Equal(t, res.Ahead, j.Hold, "held for as long as the claim decided ahead")
		}
		require.LessOrEqual(t, res.Ahead, time.Second, "never more than the lead")
		info, err := s.GetJob(ctx, got[1])
		require.NoError(t, err)
		require.Equal(t, engine.Micros(j.ClaimedAt), engine.Micros(info.AttemptedAt), "and the stored one")
	})
}

// A claim decided ahead, as of a slot, charges the budget as of that
// slot; a claim that commits after it but read an earlier clock is judged
// against that charge, and the bound holds by claim time.
func TestAClaimDecidedAheadBindsTheClaimsAfterIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		// One per 2 s, burst 1: every step below comes well inside 2 s.
		lim := limits{"k": spec(t, "k", 1, 2*time.Second, 1)}
		got := enqueue(t, s, time.Now(), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, time.Now())
		claim := func(due bool) *engine.ClaimResult {
			lead := time.Duration(0)
			if due {
				lead = 3 * time.Second
			}
			return claimOnDatabaseClock(t, s, pid, lim, 5, lead)
		}
		first := claim(false)
		require.Equal(t, []int64{got[0]}, ids(first.Jobs))
		slot := first.Deferred[0].Until

		ahead := claim(true)
		require.Equal(t, []int64{got[1]}, ids(ahead.Jobs), "the returning job, admitted as of its slot")
		require.Positive(t, ahead.Ahead)
		require.True(t, slot.Equal(ahead.DecidedAt), "decided as of the slot %s, not %s", slot, ahead.DecidedAt)

		late := enqueue(t, s, time.Now(), limited("k", "k/x"))
		after := claim(false)
		require.Empty(t, after.Jobs, "its clock is before the slot, but the slot's admission is charged")
		require.True(t, after.DecidedAt.Before(ahead.DecidedAt), "it decided at an earlier time, after the other committed")
		require.Equal(t, late[0], after.Deferred[0].JobID)
		require.True(t, slot.Add(2*time.Second).Equal(after.Deferred[0].Until), "the next slot after the one taken ahead: %s", after.Deferred[0].Until)
		claims := []time.Time{first.DecidedAt, ahead.DecidedAt}
		require.Equal(t, 1, ratelimit.BusiestWindow(claims, 2*time.Second))
	})
}

// claimOnDatabaseClock claims up to max jobs of the default queue, deciding
// on the database's clock; with a lead, it first takes the waiting jobs
// due within it (PromoteDue, DueLead).
func claimOnDatabaseClock(t *testing.T, s *engine.Store, pid int64, lim limits, max int, lead time.Duration) *engine.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: max,
		Clock: engine.DatabaseTime(time.Now), Limits: lim, PromoteDue: lead > 0, DueLead: lead})
	require.NoError(t, err)
	return res
}

// Limited and unlimited ready jobs are separate streams: a flood on a
// tight budget at the head of a queue does not stand between a claim and
// the unlimited jobs behind it, and a claim without limits never takes a
// limited job unchecked.
func TestAFloodDoesNotStandBeforeUnlimitedJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		flood := make([]engine.NewJob, 300)
		for i := range flood {
			flood[i] = limited("k", "k/x")
		}
		enqueue(t, s, t0, flood...)
		free := enqueue(t, s, t0, job("free", "default", 0), job("free", "default", 0))
		pid := register(t, s, t0)
		require.Equal(t, free, ids(claim(t, s, pid, t0, 10).Jobs), "no limits: only the unlimited jobs")
		enqueue(t, s, t0, job("free", "default", 0))
		res := claimLimited(t, s, pid, t0, 3, lim, time.Hour)
		require.Len(t, res.Jobs, 2, "one flood job admitted, and the unlimited one behind the flood")
		require.Equal(t, "free", res.Jobs[1].Kind)
	})
}

// The jobs behind a budget a claim deferred on are deferred in bulk, once
// each — slots within the horizon, parked past it — and counted; a budget
// with room again is left to the claims.
func TestDeferOverflowDefersTheJobsBehindAFullBudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		flood := make([]engine.NewJob, 50)
		for i := range flood {
			flood[i] = limited("k", "k/x")
		}
		got := enqueue(t, s, t0, flood...)
		slotted := slotted("c", 1)
		slotted.RateKeys = []engine.RateKey{{Key: "k/x", Cost: 1}}
		holder := enqueue(t, s, t0, slotted)[0]
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, 5*time.Minute)
		require.Len(t, res.Jobs, 1)
		require.True(t, res.MoreLimited)
		require.Equal(t, []engine.Overflow{{Queue: "default", Kind: "k", RateKeys: "k/x", Key: "k/x"}}, res.Overflows)
		o := res.Overflows[0]
		var slots []time.Time
		total := 0
		for _, want := range []int{20, 20, 8} {
			swept, ss, err := s.DeferOverflow(ctx, engine.At(t0), o, 5*time.Minute, 20)
			n := len(swept)
			require.NoError(t, err)
			require.Equal(t, want, n, "every ready job like it, in batches of 20")
			total += n
			slots = append(slots, ss...)
		}
		require.Equal(t, 48, total)
		require.Equal(t, []time.Time{at(2 * time.Minute), at(3 * time.Minute), at(4 * time.Minute), at(5 * time.Minute)}, slots,
			"the next slots, one interval apart, up to the horizon")
		require.Equal(t, engine.StateScheduled, state(t, s, got[2]).State)
		for _, id := range got[6:] {
			require.Equal(t, engine.StateParked, state(t, s, id).State)
		}
		require.Equal(t, engine.StateReady, state(t, s, holder).State, "a job holding a concurrency slot is left to the claims")
		require.Equal(t, 44, budgetNamed(t, s, "k/x").Parked)

		enqueue(t, s, t0, limited("k", "k/x"))
		swept, _, err := s.DeferOverflow(ctx, engine.At(at(time.Hour)), o, 5*time.Minute, 20)
		n := len(swept)
		require.NoError(t, err)
		require.Zero(t, n, "an hour on, the budget has room: nothing is deferred")
	})
}

// A limit with an emission interval of about 11 µs (100,000 a second on
// one budget, here as 1,000 per 10 ms with a burst of 100) keeps its bound
// and its drain rate, claim by claim on a clock moving in steps of 37 µs.
func TestAMicrosecondLimitKeepsItsBoundAndRate(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		const per = 10 * time.Millisecond
		lim := limits{"k": spec(t, "k", 1000, per, 100)}
		// Each 37 µs step is a promotion and a claim, which under -race
		// cost SQLite many times what they cost the others: it gets 1,200
		// jobs, which still drain over more than a window of 10 ms (12 ms,
		// where a step is 0.3% of the span the rate is measured on, against
		// the 1% the rate is held to); the others keep 3,000 (32 ms).
		n := 3000
		if s.Dialect().Name() == "sqlite" {
			n = 1200
		}
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = limited("k", "k/x")
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		var admitted []time.Time
		now := t0
		for len(admitted) < len(jobs) && now.Before(t0.Add(time.Second)) {
			_, _, err := s.Promote(context.Background(), engine.At(now), 5000)
			require.NoError(t, err)
			res := claimLimited(t, s, pid, now, 5000, lim, time.Hour)
			for range res.Jobs {
				admitted = append(admitted, res.DecidedAt)
			}
			now = now.Add(37 * time.Microsecond)
		}
		require.Len(t, admitted, len(jobs))
		require.LessOrEqual(t, ratelimit.BusiestWindow(admitted, per), 1000)
		// After the burst of 100, 901 per 10 ms.
		rate := float64(len(admitted)-100) / admitted[len(admitted)-1].Sub(admitted[99]).Seconds()
		require.InEpsilon(t, 90_100.0, rate, 0.01, "drained at %.0f/s", rate)
	})
}
