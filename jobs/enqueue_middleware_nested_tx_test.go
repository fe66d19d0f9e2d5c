package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// txKey carries the caller's transaction to enqueue middleware, as an app
// that keeps its transaction in the context does.
type txKey struct{}

// Enqueue middleware in the caller's transaction that, after next,
// enqueues a companion job (an audit record) into the same transaction:
// each enqueue sets a savepoint of its own, so the inner one nests in the
// outer on every database (MySQL replaces a savepoint of the same name,
// and the outer enqueue then failed to release its own, its job left in
// the transaction). When the companion commits, both jobs do; when the
// database refuses the companion, the outer enqueue fails and its
// transaction holds neither, should the caller commit anyway.
func TestEnqueueMiddlewareEnqueuingIntoTheSameCallersTransactionAfterNext(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		refuseByTrigger(t, h.store)
		var c *jobs.Client
		note := "audit"
		audit := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			if js[0].Kind != (mwAtomic{}).Kind() {
				return nil
			}
			tx := ctx.Value(txKey{})
			if tx == nil {
				return nil
			}
			_, err := c.EnqueueTx(ctx, tx, mwAtomicNote{Note: note})
			return err
		}
		c = atomicClient(t, h.store, audit)

		tx, commit, _ := callerTx(t, h.store)
		_, err := c.EnqueueTx(context.WithValue(ctx, txKey{}, tx), tx, mwAtomic{N: 1})
		commit() // whatever the enqueue returned: what is there then?
		require.NoError(t, err)
		require.Equal(t, 2, countAllJobs(t, h.store), "the job and its audit companion")

		note = "REFUSE"
		tx, commit, _ = callerTx(t, h.store)
		_, err = c.EnqueueTx(context.WithValue(ctx, txKey{}, tx), tx, mwAtomic{N: 2})
		require.Error(t, err, "the companion was refused, and the middleware returned its error")
		kept, kerr := c.EnqueueTx(ctx, tx, mwAtomicNote{Note: "kept"})
		commit()
		require.NoError(t, kerr, "the caller's transaction goes on")
		require.Equal(t, 3, countAllJobs(t, h.store), "only the caller's later job (id %d) was added", kept.ID)
	})
}
