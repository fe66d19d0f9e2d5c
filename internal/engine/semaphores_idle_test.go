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
)

// semaphoreNames lists the keys that have a semaphore row.
func semaphoreNames(t *testing.T, s *engine.Store) []string {
	t.Helper()
	all, err := s.ListSemaphores(context.Background())
	require.NoError(t, err)
	var out []string
	for _, sem := range all {
		out = append(out, sem.Name)
	}
	return out
}

// clearIdleSemaphores runs the hourly clean-up at now, in batches of
// batch, and returns how many rows it deleted.
func clearIdleSemaphores(t *testing.T, s *engine.Store, now time.Time, batch int) int {
	t.Helper()
	n, err := s.ClearIdleSemaphores(context.Background(), engine.At(now), engine.SemaphoreIdleAge, batch, 0)
	require.NoError(t, err)
	return n
}

// docs/concurrency.md: the hourly clean-up deletes the semaphore of a key
// that holds no slot, has no blocked job and saw no activity for an hour;
// it keeps one with a slot held, one with a blocked job (a job blocked by
// a transaction that raced the one giving the slot back, which the
// dispatcher's next tick unblocks) and one used within the hour. It goes
// in batches, past the rows it keeps. The next enqueue of a deleted key
// creates its row again, declaring its limit.
func TestIdleSemaphoresAreDeletedAndComeBackWithTheirNextJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		var idle []string
		for i := range 5 {
			k := fmt.Sprintf("c/idle/%d", i)
			idle = append(idle, k)
			got := enqueue(t, s, t0, slotted(k, 2))
			_, err := s.CancelJobs(ctx, engine.At(t0), got, "")
			require.NoError(t, err)
		}
		held := enqueue(t, s, t0, slotted("c/held", 1))
		_, err := s.CancelJobs(ctx, engine.At(at(90*time.Minute)), enqueue(t, s, at(90*time.Minute), slotted("c/recent", 1)), "")
		require.NoError(t, err)
		// c/blocked: a blocked job, and no slot held (its holder gone).
		got := enqueue(t, s, t0, slotted("c/blocked", 1), slotted("c/blocked", 1))
		require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
		_, err = s.DB().Exec(ctx, fmt.Sprintf("DELETE FROM sluice_jobs WHERE id = %d", got[0]))
		require.NoError(t, err)
		_, err = s.DB().Exec(ctx, "UPDATE sluice_semaphores SET held = 0 WHERE name = 'c/blocked'")
		require.NoError(t, err)

		require.Zero(t, clearIdleSemaphores(t, s, at(59*time.Minute), 2), "nothing is idle for an hour yet")
		require.Equal(t, len(idle), clearIdleSemaphores(t, s, at(2*time.Hour), 2), "in batches of 2, past the rows kept")
		require.ElementsMatch(t, []string{"c/blocked", "c/held", "c/recent"}, semaphoreNames(t, s))
		require.True(t, state(t, s, held[0]).HoldsSlot)

		// The blocked job is unblocked as before.
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Hour)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State)

		// A deleted key's next job takes a slot under the limit it declares.
		again := enqueue(t, s, at(3*time.Hour), slotted(idle[0], 1), slotted(idle[0], 1))
		require.Equal(t, engine.StateReady, state(t, s, again[0]).State)
		require.Equal(t, engine.StateBlocked, state(t, s, again[1]).State)
		sem := semaphore(t, s, idle[0])
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Limit)
		require.Equal(t, 1, sem.Holding)
		require.Equal(t, 1, sem.Blocked)
	})
}

// Race probe (PostgreSQL, MySQL). An enqueue creates the semaphore rows
// its keys lack and then locks them all; the clean-up runs between the
// two. The insert locked the row it found, so the clean-up skips it, and
// a second enqueue of the key waits for the first: one job holds the slot
// (To 1), the other is blocked, and the key counts one. Were the row
// deleted there (PostgreSQL's insert left an existing row alone), the
// first enqueue would find no row to lock and save its slot over the one
// the second enqueue took on a row of its own: two jobs holding the only
// slot.
func TestTheCleanUpLeavesTheSemaphoreOfAnEnqueueThatFoundIt(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: the enqueue holds the only write lock
		}
		ctx := context.Background()
		_, err := s.CancelJobs(ctx, engine.At(t0), enqueue(t, s, t0, slotted("k", 1)), "")
		require.NoError(t, err)
		cleaner, other := open(), open()
		now := at(2 * time.Hour)
		rs, rec := testdb.Record(s)
		var wg sync.WaitGroup
		var deleted int
		var cleanErr, otherErr error
		var second []engine.Enqueued
		armed := true
		rec.Before = func(q string) {
			if !armed || !isSemaphoreLock(q) {
				return
			}
			armed = false // the enqueue's insert ran; its lock is next
			deleted, cleanErr = cleaner.ClearIdleSemaphores(ctx, engine.At(now), engine.SemaphoreIdleAge, 500, 0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				second, otherErr = other.Enqueue(ctx, nil, engine.At(now), []engine.NewJob{slotted("k", 1)})
			}()
		}
		first, err := rs.Enqueue(ctx, nil, engine.At(now), []engine.NewJob{slotted("k", 1)})
		wg.Wait()
		require.NoError(t, err)
		require.NoError(t, cleanErr)
		require.NoError(t, otherErr)
		require.False(t, armed, "the enqueue locked k")
		require.Zero(t, deleted, "the clean-up skipped the row the enqueue holds")
		require.Equal(t, engine.StateReady, state(t, s, first[0].ID).State)
		require.Equal(t, engine.StateBlocked, state(t, s, second[0].ID).State)
		sem := semaphore(t, s, "k")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Holding)
		require.Equal(t, 1, sem.Blocked)
	})
}

// Race probe (PostgreSQL, MySQL). The clean-up has locked an idle
// semaphore and is about to delete it when an enqueue of its key comes:
// the enqueue waits for the clean-up, which deletes the row and commits,
// and then creates the row anew and takes its slot, declaring its limit.
// Nothing of the deleted row survives into the new one.
func TestAnEnqueueWaitingForTheCleanUpCreatesTheSemaphoreAgain(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		_, err := s.CancelJobs(ctx, engine.At(t0), enqueue(t, s, t0, slotted("k", 3)), "")
		require.NoError(t, err)
		other := open()
		now := at(2 * time.Hour)
		rs, rec := testdb.Record(s)
		var wg sync.WaitGroup
		var enqErr error
		var got []engine.Enqueued
		armed := true
		rec.Before = func(q string) {
			if !armed || !strings.HasPrefix(q, "DELETE FROM sluice_semaphores") {
				return
			}
			armed = false // the clean-up holds k, and deletes it next
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, enqErr = other.Enqueue(ctx, nil, engine.At(now), []engine.NewJob{slotted("k", 1), slotted("k", 1)})
			}()
			testdb.WaitForLockWaits(t, s, 1, "sluice_semaphores", "INSERT INTO sluice_semaphores")
		}
		deleted, err := rs.ClearIdleSemaphores(ctx, engine.At(now), engine.SemaphoreIdleAge, 500, 0)
		wg.Wait()
		require.NoError(t, err)
		require.NoError(t, enqErr)
		require.False(t, armed)
		require.Equal(t, 1, deleted)
		require.Equal(t, engine.StateReady, state(t, s, got[0].ID).State)
		require.Equal(t, engine.StateBlocked, state(t, s, got[1].ID).State)
		sem := semaphore(t, s, "k")
		require.Equal(t, 1, sem.Limit, "declared by the enqueue, not the deleted row's 3")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Holding)
		require.Equal(t, 1, sem.Blocked)
	})
}

// Race probe (every database). Enqueuers, claimers and finishers work
// over a few keys, one job at a time per key, while the clean-up runs
// over and over with no idle age (so that every key that holds no slot
// is a candidate at every run): every key still counts exactly the jobs
// that hold its slots, never more than one, and every job runs.
func TestTheCleanUpRacingEnqueuesAndFinishesKeepsEveryKeysCount(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		keys := []string{"a", "b", "c"}
		const workers, rounds = 3, 20
		stores := []*engine.Store{s, s, s, s}
		if s.Dialect().Capabilities().RowLocks {
			for i := range stores {
				stores[i] = open()
			}
		}
		pid := register(t, s, t0)
		// Every row is stamped at t0: at t0+1h, with no idle age, each one
		// that holds no slot is a candidate.
		later := engine.At(at(time.Hour))
		stop := make(chan struct{})
		var cleaned sync.WaitGroup
		cleaned.Add(1)
		runs := 0
		go func() {
			defer cleaned.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := stores[3].ClearIdleSemaphores(ctx, later, 0, 2, 0)
				if !assertNoErr(t, err) {
					return
				}
				runs++
				all, err := stores[3].ListSemaphores(ctx)
				if !assertNoErr(t, err) {
					return
				}
				for _, sem := range all {
					if sem.Held != sem.Holding || sem.Held > 1 {
						t.Errorf("key %s counts %d slots held, and %d jobs hold one (To 1)", sem.Name, sem.Held, sem.Holding)
						return
					}
				}
			}
		}()
		var wg sync.WaitGroup
		var mu sync.Mutex
		completed := 0
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := stores[w]
				for i := range rounds {
					key := keys[(w+i)%len(keys)]
					if _, err := st.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{slotted(key, 1)}); !assertNoErr(t, err) {
						return
					}
					res, err := st.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
					if !assertNoErr(t, err) {
						return
					}
					if len(res.Jobs) == 0 {
						continue
					}
					rs := runsOf(res.Jobs)
					if !assertNoErr(t, st.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: rs, SlotHolders: rs})) {
						return
					}
					mu.Lock()
					completed += len(rs)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(stop)
		cleaned.Wait()
		require.Positive(t, runs)
		// The jobs left: blocked ones and ready ones holding a slot.
		for {
			_, _, err := s.MaintainSemaphores(ctx, engine.At(t0), 100)
			require.NoError(t, err)
			res := claim(t, s, pid, t0, 10)
			if len(res.Jobs) == 0 {
				break
			}
			rs := runsOf(res.Jobs)
			require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: rs, SlotHolders: rs}))
			completed += len(rs)
		}
		require.Equal(t, workers*rounds, completed, "every job ran")
		all, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		for _, sem := range all {
			require.Zero(t, sem.Held, sem.Name)
			require.Zero(t, sem.Holding, sem.Name)
			require.Zero(t, sem.Blocked, sem.Name)
		}
		n, err := s.ClearIdleSemaphores(ctx, later, 0, 2, 0)
		require.NoError(t, err)
		require.Equal(t, len(all), n, "every key is idle now")
		require.Empty(t, semaphoreNames(t, s))
	})
}

// The clean-up reads the blocked jobs of the keys it found idle through
// the index of blocked jobs, never the jobs table at large, and walks the
// semaphores in their primary key's order, without sorting them: an
// hourly pass reads each row once.
func TestIdleSemaphoresAreCheckedThroughTheirIndexes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = slotted(fmt.Sprintf("acct/%04d", i%500), 1)
		}
		enqueue(t, s, t0, many...)
		keys := []string{"acct/0001", "acct/0002"}
		name := s.Dialect().Name()
		if name == "postgres" {
			// A bitmap heap scan over the index: the plan names it below.
			_, err := s.DB().Exec(context.Background(), "ANALYZE sluice_jobs")
			require.NoError(t, err)
			text, args := s.SQL().BlockedAmong(keys)
			plan := postgresGenericPlanJSON(t, s, text, len(args))
			require.Contains(t, plan, `"Index Name": "sluice_jobs_blocked"`, plan)
			require.NotContains(t, plan, "Seq Scan", plan)
		} else {
			stmts := map[string]func() (string, []any){"BlockedAmong": func() (string, []any) { return s.SQL().BlockedAmong(keys) }}
			for stmt, via := range plansOf(t, s, stmts) {
				t.Logf("%s: %v", name, via)
				require.NotEmpty(t, via, "%s: %s", name, stmt)
				for _, v := range via {
					require.Contains(t, v, "sluice_jobs_blocked", "%s: %s", name, stmt)
				}
			}
		}
		// Many idle keys: the walk is the read of most of the table.
		idle := make([]engine.NewJob, 600)
		for i := range idle {
			idle[i] = slotted(fmt.Sprintf("idle/%04d", i), 1)
		}
		_, err := s.CancelJobs(context.Background(), engine.At(t0), enqueue(t, s, t0, idle...), "")
		require.NoError(t, err)
		if name == "postgres" {
			// With the table's statistics, as autovacuum keeps them (where
			// few rows are idle, sorting those few is the cheaper plan).
			_, err = s.DB().Exec(context.Background(), "ANALYZE sluice_semaphores")
			require.NoError(t, err)
		}
		text, args := s.SQL().LockIdleSemaphores("idle/0100", engine.Micros(at(time.Hour)), 500)
		require.False(t, sorts(t, s, text, args), "%s: LockIdleSemaphores sorts", name)
	})
}
