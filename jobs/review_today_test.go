package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/concurrency.md, "A worker's start declares its limits": "In a
// rolling deploy, old and new workers each declare their own To as they
// start, as their enqueues do: each key's limit is that of the last start
// or enqueue to declare one, the new version's once the last worker to
// start runs it."
//
// An old worker (To 2) starts while an app's transaction holds key b's
// semaphore: it declares 2 on a and leaves b for its refresh. The new
// worker (To 5) then starts, the last to start, and declares 5 on both.
// No enqueue follows. The old worker's refresh, 5 s after its start, then
// declares its 2 on b: the key ends under the old version's To though the
// last worker to start runs the new one, and b's backlog runs 2 at a time
// until a new job of b is enqueued.
func TestAnEarlierStartsRefreshDoesNotUndoALaterStartsLimit(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(3)))
		h.enqueue(accountSync{Account: "a"})
		h.enqueue(accountSync{Account: "b"})
		tx, commit, rollback := callerTx(t, h.store)
		committed := false
		defer func() {
			if !committed {
				rollback()
			}
		}()
		_, err := h.client.EnqueueTx(ctx, tx, accountSync{Account: "b"})
		require.NoError(t, err)

		older := jobs.NewRegistry()
		_, release := blockingSyncs(t, older, 2)
		w1, err := jobs.NewWorker(testdb.Public(h.store), older, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), OverrideRefresh: 5 * time.Second})
		require.NoError(t, err)
		stop := h.run(w1)
		defer stop()
		defer close(release)
		awaitTimer(t, h, t0.Add(5*time.Second)) // the old worker's start's declaration is done
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit)
		require.Equal(t, 3, semaphoreOf(t, h, "account_sync/b").Limit, "held by the app's transaction: left for later")
		commit()
		committed = true

		newer := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](newer, syncLimit(5)))
		w2, err := jobs.NewWorker(testdb.Public(h.store), newer, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		_, err = w2.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit, "the last start's")
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/b").Limit, "the last start's")

		h.clock.Advance(5 * time.Second)
		awaitTimer(t, h, t0.Add(10*time.Second)) // the old worker's refresh is done
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/b").Limit,
			"the new worker started last and no enqueue followed: its To holds, not the old worker's, retried on a key it found busy before")
	})
}

// docs/concurrency.md: "A Group whose kinds declare different limits
// (`sluice check`'s `W005`) is left to its enqueues: a worker's start
// declares none on it." The worker's start leaves a group alone when its
// kinds differ in To or in Duration (slotDeclarations.mixed), but W005
// compares To alone: a group whose kinds share To and differ in Duration
// is skipped at every start — its limit is never declared by one, and
// the start logs a warning that names W005 — while `sluice check`
// reports nothing for it.
func TestAGroupAWorkersStartSkipsIsOneCheckReports(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[groupedExportA](h.reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: "t"})))
		h.enqueue(groupedExportA{})
		require.Equal(t, 1, semaphoreOf(t, h, "exports/t").Limit)

		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[groupedExportA](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 3, Duration: time.Minute, Group: "exports", Key: "t"})))
		require.NoError(t, jobs.Declare[groupedExportB](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 3, Duration: 2 * time.Minute, Group: "exports", Key: "t"})))
		findings, err := jobs.Check(ctx, reg, testdb.Public(h.store))
		require.NoError(t, err)
		w005 := false
		for _, f := range findings {
			w005 = w005 || f.Code == jobs.CodeConcurrencyGroupMismatch
		}

		w, err := jobs.NewWorker(testdb.Public(h.store), reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		skipped := semaphoreOf(t, h, "exports/t").Limit == 1
		require.Equal(t, skipped, w005, "a group the worker's start leaves alone (skipped: %v) is one W005 reports (reported: %v)", skipped, w005)
	})
}
