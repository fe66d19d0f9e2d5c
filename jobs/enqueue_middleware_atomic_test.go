package jobs_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// Enqueue middleware and "Enqueue is all or nothing" (docs/guarantees.md):
// without a caller's transaction the whole middleware chain is one
// transaction, which commits only when the chain succeeds, so that a
// caller that retries a failed enqueue creates no duplicates.

type mwAtomic struct{ N int }

func (mwAtomic) Kind() string { return "mw_atomic" }

type mwAtomicSlot struct{ Account int }

func (mwAtomicSlot) Kind() string { return "mw_atomic_slot" }

// countAllJobs counts every job of the store, whatever its state.
func countAllJobs(t *testing.T, s *engine.Store) int {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	n := 0
	for _, q := range st {
		for _, c := range q.Counts {
			n += int(c)
		}
	}
	return n
}

// atomicClient is a client of s whose enqueues run through mw.
func atomicClient(t *testing.T, s *engine.Store, mw ...jobs.EnqueueMiddleware) *jobs.Client {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Declare[mwAtomic](reg))
	require.NoError(t, jobs.Declare[mwAtomicNote](reg))
	require.NoError(t, jobs.Declare[mwAtomicSlot](reg,
		jobs.ConcurrencyLimit(concurrency.Limit[mwAtomicSlot]{Key: func(a mwAtomicSlot) any { return a.Account }})))
	return jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Middleware: mw})
}

// A middleware that calls next twice makes the enqueue fail (as
// documented), and the first next's write is rolled back with it.
func TestAnEnqueueWhoseMiddlewareCalledNextTwiceWritesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		twice := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			return next(ctx) // a retry loop gone wrong
		}
		c := atomicClient(t, s, twice)
		_, err := c.Enqueue(context.Background(), mwAtomic{N: 1})
		require.ErrorContains(t, err, "called next twice", "the enqueue fails, as documented")
		require.Zero(t, countAllJobs(t, s), "the enqueue failed, yet its job was written: a caller's retry duplicates it")
	})
}

// A middleware that returns an error after next wrote the jobs (an audit
// write that failed, say) fails the enqueue, and nothing is written: not
// the plain jobs of an EnqueueMany, nor a job that took a concurrency slot
// (whose slot is not held either).
func TestAnEnqueueWhoseMiddlewareFailsAfterNextWritesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		audit := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			return errors.New("audit log unavailable")
		}
		c := atomicClient(t, s, audit)
		_, err := c.EnqueueMany(ctx, []jobs.Item{{Args: mwAtomic{N: 1}}, {Args: mwAtomic{N: 2}}})
		require.ErrorContains(t, err, "audit log unavailable")
		_, err = c.Enqueue(ctx, mwAtomicSlot{Account: 1})
		require.ErrorContains(t, err, "audit log unavailable")
		require.Zero(t, countAllJobs(t, s), "the enqueues failed, yet their jobs were written: a caller's retry duplicates them")
		sems, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		for _, sem := range sems {
			require.Zero(t, sem.Held, "the failed enqueue's slot is not held")
		}
	})
}

// A middleware that panics after next: the panic reaches the caller, the
// chain's transaction is rolled back (nothing written), and the store is
// not left waiting on it (SQLite has one connection): the next enqueue
// goes through.
func TestAnEnqueueWhoseMiddlewarePanicsAfterNextWritesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		var boom bool
		mw := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			if boom {
				panic("middleware after next")
			}
			return nil
		}
		c := atomicClient(t, s, mw)
		boom = true
		require.PanicsWithValue(t, "middleware after next", func() { _, _ = c.Enqueue(ctx, mwAtomic{N: 1}) })
		require.Zero(t, countAllJobs(t, s))
		boom = false
		res, err := c.Enqueue(ctx, mwAtomic{N: 2})
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, res.State)
		require.Equal(t, 1, countAllJobs(t, s))
	})
}

// A deadlock (or serialization failure) in the write is retried inside
// next, in a new transaction: the middleware runs once, the job is written
// once, and next returns its result.
func TestEnqueueMiddlewareRunsOnceWhenItsWriteIsRetried(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		fs, f := testdb.WithFaults(s)
		f.FailOnce = "INSERT INTO sluice_jobs"
		var runs, nexts int
		var got jobs.Enqueued
		mw := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			runs++
			err := next(ctx)
			nexts++
			got = js[0].Result
			return err
		}
		c := atomicClient(t, fs, mw)
		res, err := c.Enqueue(context.Background(), mwAtomic{N: 1})
		require.NoError(t, err)
		require.False(t, f.Pending())
		require.Empty(t, f.FailOnce, "the injected deadlock fired")
		require.Equal(t, 1, runs)
		require.Equal(t, 1, nexts)
		require.Equal(t, res, got)
		require.Equal(t, 1, countAllJobs(t, s))
	})
}

// The chain's transaction lives as long as the enqueue, not as long as
// the context a middleware gives next: a middleware that cancels that
// context as soon as next returns (a span's, a timeout's) still has its
// jobs committed.
func TestAnEnqueueCommitsWhenMiddlewareEndsTheContextItGaveNext(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		mw := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			nctx, cancel := context.WithCancel(ctx)
			defer cancel()
			return next(nctx)
		}
		c := atomicClient(t, s, mw)
		_, err := c.EnqueueMany(context.Background(), []jobs.Item{{Args: mwAtomic{N: 1}}, {Args: mwAtomicSlot{Account: 1}}})
		require.NoError(t, err)
		require.Equal(t, 2, countAllJobs(t, s))
	})
}

// A middleware that calls next twice fails the enqueue even when it drops
// the second call's error (fire-and-forget, or a retry helper that logs
// instead of returning): the chain's transaction was committed, and the
// enqueue succeeded, found by a review of the change that made the chain
// one transaction.
func TestAMiddlewareThatCallsNextTwiceFailsTheEnqueueEvenIfItDropsTheError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		twice := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			_ = next(ctx) // the second call's error is dropped
			return nil
		}
		c := atomicClient(t, s, twice)
		_, err := c.Enqueue(context.Background(), mwAtomic{N: 1})
		require.ErrorContains(t, err, "called next twice")
		require.Zero(t, countAllJobs(t, s), "nothing is written when next was called twice")
	})
}

type mwAtomicNote struct{ Note string }

func (mwAtomicNote) Kind() string { return "mw_atomic_note" }

// In the caller's transaction, a failed enqueue through middleware leaves
// none of its jobs there (EnqueueMiddleware, guarantees.md: "In your
// transaction a batch the database refused part way leaves none of its
// jobs behind, should you go on and commit"): whether a middleware fails,
// panics or calls next twice after the write, or the database refused the
// write itself (on PostgreSQL too, whose failed statement would abort the
// transaction). The caller's transaction goes on, an enqueue that
// succeeds in it commits with it, and no concurrency slot is left held.
func TestAFailedEnqueueThroughMiddlewareLeavesNothingInTheCallersTransaction(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		refuseByTrigger(t, h.store)
		mode := ""
		mw := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			err := next(ctx)
			switch {
			case err != nil:
				return err
			case mode == "fail":
				return errors.New("audit log unavailable")
			case mode == "panic":
				panic("middleware after next")
			case mode == "twice":
				_ = next(ctx)
			}
			return nil
		}
		c := atomicClient(t, h.store, mw)
		for _, m := range []string{"fail", "panic", "twice", "refused"} {
			t.Run(m, func(t *testing.T) {
				many := []jobs.Item{{Args: mwAtomic{N: 1}}, {Args: mwAtomicSlot{Account: 7}}, {Args: mwAtomicNote{Note: "fine"}}}
				tx, commit, rollback := callerTx(t, h.store)
				done := false
				defer func() {
					if !done {
						rollback() // a failed assertion must not leave it open
					}
					for _, q := range []string{"DELETE FROM sluice_jobs", "DELETE FROM sluice_semaphores"} {
						_, err := h.store.DB().Exec(ctx, q)
						require.NoError(t, err)
					}
				}()
				items := many
				mode = m
				if m == "refused" {
					mode = ""
					items = append(slices.Clone(many), jobs.Item{Args: mwAtomicNote{Note: "REFUSE"}})
				}
				if m == "panic" {
					require.PanicsWithValue(t, "middleware after next", func() { _, _ = c.EnqueueManyTx(ctx, tx, items) })
				} else {
					_, err := c.EnqueueManyTx(ctx, tx, items)
					require.Error(t, err, "the enqueue fails")
				}
				mode = ""
				kept, err := c.EnqueueTx(ctx, tx, mwAtomic{N: 99})
				require.NoError(t, err, "the caller's transaction goes on")
				commit()
				done = true

				ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs")
				require.Equal(t, []int64{kept.ID}, ids, "the failed enqueue's jobs were committed with the caller's transaction")
				sems, err := h.store.ListSemaphores(ctx)
				require.NoError(t, err)
				for _, sem := range sems {
					require.Zero(t, sem.Held, "the failed enqueue's slot is not held")
				}
			})
		}
	})
}
