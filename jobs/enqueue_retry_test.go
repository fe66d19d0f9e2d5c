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
