package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// A deadlock or serialization failure of a plain enqueue's one insert is
// written again, as the enqueues that take a transaction of the store's
// are: the caller sees no error, and each job is written once. (It
// returned the database's retryable error.)
func TestAPlainEnqueueIsWrittenAgainAfterADeadlock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		fs, f := testdb.WithFaults(s)
		c := atomicClient(t, fs)

		f.FailOnce = "INSERT INTO sluice_jobs"
		res, err := c.Enqueue(ctx, mwAtomic{N: 1})
		require.NoError(t, err)
		require.Empty(t, f.FailOnce, "the injected deadlock fired")
		require.Equal(t, engine.StateReady, res.State)

		f.FailOnce = "INSERT INTO sluice_jobs"
		many, err := c.EnqueueMany(ctx, []jobs.Item{{Args: mwAtomic{N: 2}}, {Args: mwAtomic{N: 3}}})
		require.NoError(t, err)
		require.Empty(t, f.FailOnce, "the injected deadlock fired")
		require.Len(t, many, 2)
		require.Equal(t, 3, countAllJobs(t, s), "each job written once")
	})
}

// observability.md: a deadlock or serialization failure in an enqueue's
// write is written again, but with enqueue middleware the commit of the
// chain's transaction is not run again: the chain ran, and its
// middleware with it, once. A retryable failure of that commit is
// returned (nothing written; retrying the enqueue writes no duplicate),
// where an enqueue without middleware, whose transaction the store
// commits itself, writes the jobs again in a new one.
func TestAMiddlewaresEnqueueReturnsARetryableCommitFailure(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		fs, f := testdb.WithFaults(s)
		pass := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			return next(ctx)
		}
		_, err := atomicClient(t, fs).Enqueue(ctx, mwAtomicSlot{Account: 0}) // the schema's check, once
		require.NoError(t, err)
		for k, c := range []struct {
			name   string
			client *jobs.Client
		}{{"without middleware", atomicClient(t, fs)}, {"with middleware", atomicClient(t, fs, pass)}} {
			// How many statements (the commit last) one enqueue takes: a
			// job with a concurrency limit, written in a transaction.
			before := f.Count()
			_, err := c.client.Enqueue(ctx, mwAtomicSlot{Account: 10 + k})
			require.NoError(t, err, c.name)
			per := f.Count() - before
			held := countAllJobs(t, s)

			f.FailAt(per)
			_, err = c.client.Enqueue(ctx, mwAtomicSlot{Account: 20 + k})
			require.False(t, f.Pending(), "%s: the commit's fault fired", c.name)
			if c.name == "without middleware" {
				require.NoError(t, err, "the store commits its own transaction, and writes the job again")
				require.Equal(t, held+1, countAllJobs(t, s))
				continue
			}
			var r engine.Retryable
			require.ErrorAs(t, err, &r, "the commit's failure is returned")
			require.True(t, r.Retryable())
			require.Equal(t, held, countAllJobs(t, s), "nothing written")
		}
	})
}
