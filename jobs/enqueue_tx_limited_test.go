package jobs_test

// What a refused enqueue of coalescing, concurrency-limited or fair jobs
// leaves in the caller's transaction: nothing (guarantees.md, DESIGN.md
// invariant 8).

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// digestJob is a kind that coalesces: an enqueue of it takes the
// enqueue's transactional path (engine.enqueueTx), not the plain insert.
type digestJob struct {
	Team string `json:"team"`
}

func (digestJob) Kind() string { return "digest_job" }

// slotJob is a kind with a concurrency limit of one per account.
type slotJob struct{ Account string }

func (slotJob) Kind() string { return "slot_job" }

// tenantFairJob is a fair kind.
type tenantFairJob struct{ Tenant string }

func (tenantFairJob) Kind() string { return "tenant_fair_job" }

// guarantees.md (and DESIGN.md invariant 8): EnqueueMany is "every job or
// none ... with EnqueueTx it commits or rolls back with your
// transaction", and TestEnqueueManyTxOfSeveralStatementsLeavesNoneWhenOneIsRefused
// holds it for plain jobs "even should the caller go on and commit it".
// A batch in the caller's transaction that holds a coalescing job was
// written without the savepoint plain batches get: when the database
// refused a later job of the batch, the coalescing job written before it
// stayed in the caller's transaction (MySQL, SQLite), and committed with
// the caller's next work; on PostgreSQL the refusal aborted the caller's
// whole transaction instead, where a plain batch's leaves it usable.
func TestEnqueueManyTxWithACoalescingJobLeavesNoneWhenOneIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[email](h.reg))
		require.NoError(t, jobs.Declare[digestJob](h.reg,
			jobs.Coalesce(coalesce.Rule[digestJob]{Key: func(d digestJob) any { return d.Team }})))
		refuseByTrigger(t, h.store)

		tx, commit, rollback := callerTx(t, h.store)
		committed := false
		defer func() {
			if !committed {
				rollback()
			}
		}()
		_, err := h.client.EnqueueManyTx(ctx, tx, []jobs.Item{{Args: digestJob{Team: "a"}}, {Args: email{To: "REFUSE"}}})
		require.Error(t, err, "the database refuses the email")
		kept, err := h.client.EnqueueTx(ctx, tx, email{To: "kept"})
		require.NoError(t, err, "the transaction goes on, as after a plain batch the database refused")
		commit()
		committed = true
		ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs ORDER BY id")
		require.Equal(t, []int64{kept.ID}, ids, "none of the refused batch's jobs: the coalescing job of the failed EnqueueManyTx was committed")
	})
}

// A refused batch of a coalescing, a concurrency-limited and a fair job,
// in the caller's transaction, with enqueue middleware or without, leaves
// nothing of what it did there: no job, no coalesce key's row pointing
// to a job that is gone, no semaphore slot taken, no fairness key
// charged. The same jobs enqueued again in that transaction are written
// as the first of their keys: the coalescing call creates its job (it
// joins no ghost), the limited job takes the slot, ready.
func TestEnqueueManyTxOfLimitedJobsUndoesTheirKeysWhenOneIsRefused(t *testing.T) {
	for _, mw := range []bool{false, true} {
		name := "plain"
		if mw {
			name = "middleware"
		}
		t.Run(name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				client := h.client
				if mw {
					pass := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
						return next(ctx)
					}
					client = jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, Middleware: []jobs.EnqueueMiddleware{pass}})
				}
				require.NoError(t, jobs.Declare[email](h.reg))
				require.NoError(t, jobs.Declare[digestJob](h.reg,
					jobs.Coalesce(coalesce.Rule[digestJob]{Key: func(d digestJob) any { return d.Team }})))
				require.NoError(t, jobs.Declare[slotJob](h.reg,
					jobs.ConcurrencyLimit(concurrency.Limit[slotJob]{Key: func(a slotJob) any { return a.Account }, To: 1})))
				require.NoError(t, jobs.Declare[tenantFairJob](h.reg, jobs.Fair(func(a tenantFairJob) any { return a.Tenant })))
				refuseByTrigger(t, h.store)
				batch := []jobs.Item{{Args: digestJob{Team: "a"}}, {Args: slotJob{Account: "acme"}}, {Args: tenantFairJob{Tenant: "t1"}}}

				tx, commit, rollback := callerTx(t, h.store)
				committed := false
				defer func() {
					if !committed {
						rollback()
					}
				}()
				_, err := client.EnqueueManyTx(ctx, tx, append(batch, jobs.Item{Args: email{To: "REFUSE"}}))
				require.Error(t, err, "the database refuses the email")
				again, err := client.EnqueueManyTx(ctx, tx, batch)
				require.NoError(t, err, "the transaction goes on")
				commit()
				committed = true

				require.False(t, again[0].Joined, "the coalescing call joined a job of the refused batch")
				require.Equal(t, engine.StateReady, h.job(again[1].ID).State, "the limited job takes the slot the refused batch's took and gave back")
				ids := jobIDs(t, h.store, "SELECT id FROM sluice_jobs ORDER BY id")
				require.Equal(t, []int64{again[0].ID, again[1].ID, again[2].ID}, ids, "only the second batch's jobs")
				require.Equal(t, []int64{again[0].ID}, jobIDs(t, h.store, "SELECT job_id FROM sluice_coalesce_keys"), "the key's row points to the second batch's job")
				require.Equal(t, []int64{1}, jobIDs(t, h.store, "SELECT held FROM sluice_semaphores"), "one slot held, the second batch's")
				require.Equal(t, []int64{1}, jobIDs(t, h.store, "SELECT COUNT(*) FROM sluice_fair_keys"), "one fairness key")
				require.Zero(t, h.job(again[2].ID).FairStart, "the fair job starts the key's first turn")
			})
		})
	}
}
