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
		ctx := context.Background()
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
			// Bounded, so that an enqueue holding k/c fails the test
			// instead of hanging it.
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			otherErr = createAndLockSemaphore(wait, other, "k/a", "k/c")
		}
		var ex engine.Executor
		var tx engine.Tx
		if callersTx {
			var err error
			tx, err = rs.DB().Begin(ctx)
			require.NoError(t, err)
			ex = tx
		}
		got, err := rs.Enqueue(ctx, ex, engine.At(t0), []engine.NewJob{slotted("k/c", 5), slotted("k/a", 5)})
		require.NoError(t, err)
		if tx != nil {
			require.NoError(t, tx.Commit(ctx))
		}
		require.Equal(t, s.Dialect().Capabilities().RowLocks, created, "the enqueue created k/a where rows are locked one by one")
		require.NoError(t, otherErr, "the other transaction waited for nothing the enqueue held")
		for _, e := range got {
			require.Equal(t, engine.StateReady, e.State)
		}
		require.Equal(t, 2, semaphore(t, s, "k/c").Held)
		require.Equal(t, 1, semaphore(t, s, "k/a").Held)
	})
}

// createAndLockSemaphore creates the semaphore row create and locks the
// row lock in one transaction of s, as a transaction creating a key's row
// used to.
func createAndLockSemaphore(ctx context.Context, s *engine.Store, create, lock string) error {
	tx, err := s.DB().Begin(ctx)
	if err != nil {
		return err
	}
	err = func() error {
		q, args := s.SQL().InsertSemaphores([]string{create})
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return err
		}
		q, args = s.SQL().LockSemaphores([]string{lock})
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
					if _, err := st.Enqueue(ctx, tx, engine.At(t0), batch); !assert.NoError(t, err, "writer %d round %d", w, round) {
						_ = tx.Rollback(ctx)
						return
					}
					if !assert.NoError(t, tx.Commit(ctx)) {
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
