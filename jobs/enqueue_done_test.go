package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// doneRecorder is enqueue middleware that registers with OnEnqueueDone and
// records what it is told, and how many jobs the database held then.
type doneRecorder struct {
	t     *testing.T
	s     *engine.Store // read from f: after the commit, its connection is free
	mu    sync.Mutex
	calls []error
	held  []int
	fail  error // returned after next
}

func (r *doneRecorder) middleware(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
	require.True(r.t, jobs.OnEnqueueDone(ctx, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, err)
		if r.s != nil {
			r.held = append(r.held, countAllJobs(r.t, r.s))
		}
	}))
	if err := next(ctx); err != nil {
		return err
	}
	return r.fail
}

// OnEnqueueDone tells enqueue middleware the outcome next cannot: f is
// called once, before the enqueue returns, with nil once its transaction
// committed (the job is there to read), and with the enqueue's error once
// it failed and wrote nothing, a failed commit or a middleware's error
// after next.
func TestOnEnqueueDoneReportsTheEnqueuesOutcome(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		r := &doneRecorder{t: t, s: base}
		c := atomicClient(t, s, r.middleware)

		_, err := c.Enqueue(ctx, mwAtomic{N: 1})
		require.NoError(t, err)
		require.Equal(t, []error{nil}, r.calls, "called once, with nil")
		require.Equal(t, []int{1}, r.held, "after the commit")

		// How many statements (the commit last) one enqueue takes.
		before := faults.Count()
		_, err = c.Enqueue(ctx, mwAtomic{N: 2})
		require.NoError(t, err)
		per := faults.Count() - before
		faults.FailAt(per)
		_, err = c.Enqueue(ctx, mwAtomic{N: 3})
		require.Error(t, err, "the commit failed")
		require.False(t, faults.Pending(), "the fault fired")
		require.Len(t, r.calls, 3)
		require.Equal(t, err, r.calls[2], "told the enqueue's error")
		require.Equal(t, 2, r.held[2], "nothing was written")

		r.fail = errors.New("audit write failed")
		_, err = c.Enqueue(ctx, mwAtomic{N: 4})
		require.ErrorIs(t, err, r.fail)
		require.Len(t, r.calls, 4)
		require.ErrorIs(t, r.calls[3], r.fail)
		require.Equal(t, 2, countAllJobs(t, base))
	})
}

// In the caller's transaction f is told nil once the jobs were written
// into it (they commit or roll back with it), before EnqueueTx returns; a
// middleware that panics has f told an error, and the panic reaches the
// caller. Outside an enqueue OnEnqueueDone registers nothing.
func TestOnEnqueueDoneInTheCallersTransactionAndOnAPanic(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		require.False(t, jobs.OnEnqueueDone(ctx, func(error) { t.Error("called outside an enqueue") }))

		r := &doneRecorder{t: t}
		c := atomicClient(t, s, r.middleware)
		tx, _, rollback := callerTx(t, s)
		_, err := c.EnqueueTx(ctx, tx, mwAtomic{N: 1})
		require.NoError(t, err)
		require.Equal(t, []error{nil}, r.calls)
		rollback()

		var told []error
		panicky := atomicClient(t, s, func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			jobs.OnEnqueueDone(ctx, func(err error) { told = append(told, err) })
			_ = next(ctx)
			panic("after next")
		})
		require.Panics(t, func() { _, _ = panicky.Enqueue(ctx, mwAtomic{N: 2}) })
		require.Len(t, told, 1)
		require.Error(t, told[0])
		require.Equal(t, 0, countAllJobs(t, s))
	})
}
