package jobs_test

// A review of what a failed or retried write leaves behind.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/jobs"
)

// reviewDigest is a kind that coalesces: an enqueue of it takes the
// enqueue's transactional path (engine.enqueueTx), not the plain insert.
type reviewDigest struct {
	Team string `json:"team"`
}

func (reviewDigest) Kind() string { return "review_digest" }

// guarantees.md (and DESIGN.md invariant 8): EnqueueMany is "every job or
// none ... with EnqueueTx it commits or rolls back with your
// transaction", and TestEnqueueManyTxOfSeveralStatementsLeavesNoneWhenOneIsRefused
// holds it for plain jobs "even should the caller go on and commit it".
// A batch in the caller's transaction that holds a coalescing job is
// written without the savepoint plain batches get: when the database
// refuses a later job of the batch, the coalescing job written before it
// stays in the caller's transaction (MySQL, SQLite), and commits with
// the caller's next work; on PostgreSQL the refusal aborts the caller's
// whole transaction instead, where a plain batch's leaves it usable.
func TestReviewEnqueueManyTxWithACoalescingJobLeavesNoneWhenOneIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[email](h.reg))
		require.NoError(t, jobs.Declare[reviewDigest](h.reg,
			jobs.Coalesce(coalesce.Rule[reviewDigest]{Key: func(d reviewDigest) any { return d.Team }})))
		refuseByTrigger(t, h.store)

		tx, commit, rollback := callerTx(t, h.store)
		committed := false
		defer func() {
			if !committed {
				rollback()
			}
		}()
		_, err := h.client.EnqueueManyTx(ctx, tx, []jobs.Item{{Args: reviewDigest{Team: "a"}}, {Args: email{To: "REFUSE"}}})
		require.Error(t, err, "the database refuses the email")
		kept, err := h.client.EnqueueTx(ctx, tx, email{To: "kept"})
		require.NoError(t, err, "the transaction goes on, as after a plain batch the database refused")
		commit()
		committed = true
		ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs ORDER BY id")
		require.Equal(t, []int64{kept.ID}, ids, "none of the refused batch's jobs: the coalescing job of the failed EnqueueManyTx was committed")
	})
}
