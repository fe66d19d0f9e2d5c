package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// awaitDeclarationWaits waits until n statements of h's database wait for
// a semaphore's lock: the worker starts that wait for a held key.
func awaitDeclarationWaits(t *testing.T, h *harness, n int) {
	t.Helper()
	testdb.WaitForLockWaits(t, h.store, n, "sluice_semaphores", "FROM sluice_semaphores", "FOR UPDATE")
}

// holdSemaphore begins a transaction that locks key's semaphore row and
// changes nothing, and returns its commit.
func holdSemaphore(t *testing.T, h *harness, key string) (commit func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := h.store.DB().Begin(ctx)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "SELECT name FROM sluice_semaphores WHERE name = '"+key+"' FOR UPDATE")
	require.NoError(t, err)
	for rows.Next() {
	}
	require.NoError(t, rows.Err())
	rows.Close()
	done := false
	t.Cleanup(func() {
		if !done {
			_ = tx.Rollback(ctx)
		}
	})
	return func() {
		t.Helper()
		done = true
		require.NoError(t, tx.Commit(ctx))
	}
}

// heldSyncs declares accountSync under To, enqueues a job of accounts a
// and b, and a second one of b in an app's transaction it leaves open,
// holding b's semaphore; it returns the transaction's commit.
func heldSyncs(t *testing.T, h *harness, to int) (commit func()) {
	t.Helper()
	require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(to)))
	h.enqueue(accountSync{Account: "a"})
	h.enqueue(accountSync{Account: "b"})
	tx, commitTx, rollback := callerTx(t, h.store)
	committed := false
	t.Cleanup(func() {
		if !committed {
			rollback()
		}
	})
	_, err := h.client.EnqueueTx(context.Background(), tx, accountSync{Account: "b"})
	require.NoError(t, err)
	return func() {
		t.Helper()
		committed = true
		commitTx()
	}
}

// docs/concurrency.md, "A worker's start declares its limits": a key whose
// semaphore another transaction holds as the worker starts — an app's
// open transaction that enqueued a job of the key — does not hold up the
// start: the worker declares its limit on the other keys at once, and on
// that one as soon as the transaction commits, waiting for its lock as an
// enqueue would, with no refresh and no clock advanced. Before, it was
// declared at the worker's first OverrideRefresh after the commit.
func TestAWorkersStartDeclaresItsLimitOnAHeldKeyAsSoonAsItsHolderCommits(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		commit := heldSyncs(t, h, 2)

		deployed := jobs.NewRegistry()
		_, release := blockingSyncs(t, deployed, 5)
		w, err := jobs.NewWorker(testdb.Public(h.store), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		defer close(release)
		awaitDeclarationWaits(t, h, 1)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit)
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/b").Limit, "held by the app's transaction")

		commit()
		require.Eventually(t, func() bool { return semaphoreOf(t, h, "account_sync/b").Limit == 5 }, 20*time.Second, time.Millisecond,
			"declared once the app's transaction committed")
	})
}

// docs/concurrency.md, "A worker's start declares its limits": "each key's
// limit is that of the last start or enqueue to declare one". An old
// worker (To 2) starts while an app's transaction holds key b's semaphore:
// it declares 2 on a, and waits for b. The transaction commits, and the
// old worker's 2 lands on b. The new worker (To 5) then starts, the last
// to start, and declares 5 on both; no enqueue follows. The old worker's
// refresh, 5 s after its start, changes nothing: b keeps the last start's
// To. Before, the old worker declared its 2 on b again at that refresh,
// and b's backlog ran 2 at a time until a new job of b was enqueued.
func TestAnEarlierStartsDeclarationOnAHeldKeyDoesNotUndoALaterStarts(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		commit := heldSyncs(t, h, 3)

		older := jobs.NewRegistry()
		_, release := blockingSyncs(t, older, 2)
		// A rate limit, so that the old worker refreshes its overrides.
		require.NoError(t, jobs.Declare[email](older, jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x"})))
		w1, err := jobs.NewWorker(testdb.Public(h.store), older, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), OverrideRefresh: 5 * time.Second})
		require.NoError(t, err)
		stop := h.run(w1)
		defer stop()
		defer close(release)
		awaitDeclarationWaits(t, h, 1)
		awaitTimer(t, h, t0.Add(5*time.Second)) // the old worker's refresh is set
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit)
		require.Equal(t, 3, semaphoreOf(t, h, "account_sync/b").Limit, "held by the app's transaction")
		commit()
		require.Eventually(t, func() bool { return semaphoreOf(t, h, "account_sync/b").Limit == 2 }, 20*time.Second, time.Millisecond,
			"the old worker's start, declared once the app's transaction committed")

		newer := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](newer, syncLimit(5)))
		w2, err := jobs.NewWorker(testdb.Public(h.store), newer, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		_, err = w2.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit, "the last start's")
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/b").Limit, "the last start's")

		h.clock.Advance(5 * time.Second)
		awaitTimer(t, h, t0.Add(10*time.Second)) // the old worker's refresh is done
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/b").Limit,
			"the new worker started last and no enqueue followed: its To holds, not the old worker's")
	})
}

// Two starts that find a key held — an old worker's (To 2), then a new
// one's (To 5, a Drain) — both wait for its lock, and declare on it in
// the order they queued once the holder commits: the old worker's 2
// first, then the new one's 5, which the key keeps. The Drain, which waits
// as an enqueue would, returns only after the commit. (The holder only
// locks the row: on PostgreSQL, two transactions waiting for a row that
// the holder changes race for its new version, and the first to wait
// nearly always, but not surely, gets it first — docs/concurrency.md.)
func TestStartsThatWaitOnAHeldKeyDeclareInTheOrderTheyQueued(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(3)))
		h.enqueue(accountSync{Account: "a"})
		h.enqueue(accountSync{Account: "b"})
		commit := holdSemaphore(t, h, "account_sync/b")

		older := jobs.NewRegistry()
		_, release := blockingSyncs(t, older, 2)
		w1, err := jobs.NewWorker(testdb.Public(h.store), older, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		stop := h.run(w1)
		awaitDeclarationWaits(t, h, 1)

		newer := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](newer, syncLimit(5)))
		w2, err := jobs.NewWorker(testdb.Public(h.store), newer, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		drained := make(chan error, 1)
		go func() {
			_, err := w2.Drain(ctx)
			drained <- err
		}()
		awaitDeclarationWaits(t, h, 2)
		select {
		case err := <-drained:
			t.Fatalf("the drain returned (%v) while the key was held", err)
		default:
		}
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit, "the new start's")
		require.Equal(t, 3, semaphoreOf(t, h, "account_sync/b").Limit, "held")

		commit()
		select {
		case err := <-drained:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the drain did not return after the commit")
		}
		close(release)
		stop() // and waits for the old worker's declarations
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/b").Limit, "the last start's, declared last")
	})
}

// A worker that waits for a held key to declare its limit on stops at
// once when told to, without waiting for the key: the declaration is
// given up, and the key keeps the limit it had.
func TestAWorkerWaitingForAHeldKeyStopsAtOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		h.enqueue(accountSync{Account: "b"})
		commit := holdSemaphore(t, h, "account_sync/b")

		deployed := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](deployed, syncLimit(5)))
		w, err := jobs.NewWorker(testdb.Public(h.store), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		stop := h.run(w)
		awaitDeclarationWaits(t, h, 1)
		stop() // fails the test if Run has not returned within 30 s
		commit()
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/b").Limit, "the declaration was given up")
	})
}

// A declaration the worker's start could not make (here the database
// refuses every statement that names key a) is logged and tried again
// in the background after a backoff that doubles, from 1 s, while the
// worker runs; once the database takes it, the key gets the limit.
func TestAWorkerTriesAFailedDeclarationAgainAfterABackoff(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		h.enqueue(accountSync{Account: "a"})
		fs, faults := testdb.WithFaults(h.store)
		faults.SetPoison("account_sync/a")

		deployed := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](deployed, syncLimit(5)))
		w, err := jobs.NewWorker(testdb.Public(fs), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		awaitTimer(t, h, t0.Add(time.Second)) // the start failed, and so did the first try after it
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit)
		h.clock.Advance(time.Second)
		awaitTimer(t, h, t0.Add(3*time.Second)) // failed again: 2 s more
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit)

		faults.SetPoison("")
		h.clock.Advance(2 * time.Second)
		require.Eventually(t, func() bool { return semaphoreOf(t, h, "account_sync/a").Limit == 5 }, 20*time.Second, time.Millisecond)
	})
}
