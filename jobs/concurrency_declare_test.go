package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// accountSync is a kind limited to To at a time per account.
type accountSync struct{ Account string }

func (accountSync) Kind() string { return "account_sync" }

// syncLimit is accountSync's concurrency limit with To.
func syncLimit(to int) jobs.RegisterOption {
	return jobs.ConcurrencyLimit(concurrency.Limit[accountSync]{To: to, Key: func(a accountSync) any { return a.Account }})
}

// blockingSyncs registers accountSync in reg under To with a handler that
// reports each start and waits for a release.
func blockingSyncs(t *testing.T, reg *jobs.Registry, to int) (started chan int64, release chan struct{}) {
	t.Helper()
	started, release = make(chan int64, 20), make(chan struct{})
	require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[accountSync]) error {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, syncLimit(to)))
	return started, release
}

// awaitTimer waits for a timer set for at on h's clock.
func awaitTimer(t *testing.T, h *harness, at time.Time) {
	t.Helper()
	select {
	case <-h.clock.WaitForTimerAt(at):
	case <-time.After(30 * time.Second):
		t.Fatalf("no timer set for %s", at.Sub(t0))
	}
}

// semaphoreOf returns key's semaphore.
func semaphoreOf(t *testing.T, h *harness, key string) engine.SemaphoreInfo {
	t.Helper()
	all, err := h.store.ListSemaphores(context.Background())
	require.NoError(t, err)
	for _, s := range all {
		if s.Name == key {
			return s
		}
	}
	t.Fatalf("no semaphore %s", key)
	return engine.SemaphoreInfo{}
}

// docs/concurrency.md, "Raising To": a deploy raises an account's To from
// 2 to 5 while 10 of its jobs are blocked behind 2 holders. The deployed
// worker's start declares 5 on the account's semaphore and hands the 3
// slots it frees to blocked jobs: 5 run, never more (the dispatcher's
// upkeep finds nothing left to hand out), and a finishing one's slot goes
// to the next blocked job. Before, the backlog ran 2 at a time until a
// new job of the account was enqueued.
func TestAWorkersStartRaisesTheLimitOfAKeyWithABacklog(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		for range 12 {
			h.enqueue(accountSync{Account: "a"})
		}
		require.Equal(t, 10, semaphoreOf(t, h, "account_sync/a").Blocked)

		deployed := jobs.NewRegistry()
		started, release := blockingSyncs(t, deployed, 5)
		w, err := jobs.NewWorker(testdb.Public(h.store), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Concurrency: 10})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		defer close(release)
		receive(t, started, 5)
		sem := semaphoreOf(t, h, "account_sync/a")
		require.Equal(t, 5, sem.Limit)
		require.Equal(t, 5, sem.Held)
		require.Equal(t, 7, sem.Blocked)

		_, err = newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()}).Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Held, "never more than 5")
		require.Equal(t, 7, semaphoreOf(t, h, "account_sync/a").Blocked)

		release <- struct{}{}
		receive(t, started, 1)
		sem = semaphoreOf(t, h, "account_sync/a")
		require.Equal(t, 5, sem.Held)
		require.Equal(t, 6, sem.Blocked)
	})
}

// docs/concurrency.md, "Lowering To": a deploy lowers an account's To from
// 5 to 2 while 5 of its jobs hold slots and 5 are blocked. The deployed
// worker's start declares 2: the 5 holders keep their slots and run, and
// no blocked job gets one until fewer than 2 hold one. Before, each
// finishing holder's slot went to a blocked job, 5 at a time, until a new
// job of the account was enqueued.
func TestAWorkersStartLowersTheLimitOfAKeyWithHolders(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(5)))
		for range 10 {
			h.enqueue(accountSync{Account: "a"})
		}

		deployed := jobs.NewRegistry()
		started, release := blockingSyncs(t, deployed, 2)
		finished := make(chan jobs.FinishEvent, 20)
		w, err := jobs.NewWorker(testdb.Public(h.store), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Concurrency: 10,
			Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { finished <- e }}})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		defer close(release)
		receive(t, started, 5)
		sem := semaphoreOf(t, h, "account_sync/a")
		require.Equal(t, 2, sem.Limit)
		require.Equal(t, 5, sem.Held, "the holders keep their slots")

		// One holder finishes, its result written (and its slot given
		// back, or handed on, in the same transaction).
		finish := func() {
			t.Helper()
			release <- struct{}{}
			id := receive(t, finished, 1)[0].JobID
			require.Eventually(t, func() bool { return h.job(id).State == engine.StateCompleted }, 20*time.Second, time.Millisecond)
		}
		for held := 4; held >= 2; held-- {
			finish()
			sem := semaphoreOf(t, h, "account_sync/a")
			require.Equal(t, held, sem.Held)
			require.Equal(t, 5, sem.Blocked, "%d holders: no slot under To 2", held)
		}
		finish()
		receive(t, started, 1)
		sem = semaphoreOf(t, h, "account_sync/a")
		require.Equal(t, 2, sem.Held)
		require.Equal(t, 4, sem.Blocked, "1 holder left: one slot under To 2")
	})
}

// Each worker's start declares its own limit, as each enqueue does: in a
// rolling deploy whose old and new workers start in turn, a key's limit
// is the one the last to start declared (or the last enqueue). A worker
// declaring no concurrency limit runs no statement for them, and one that
// declares some reads each scope once, at its start. A group whose kinds
// declare different limits is left as enqueues declare it.
func TestEachWorkersStartDeclaresItsOwnLimit(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		require.NoError(t, jobs.Declare[groupedExportA](h.reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: "t"})))
		h.enqueue(accountSync{Account: "a"})
		h.enqueue(groupedExportA{})
		start := func(reg *jobs.Registry) []string {
			t.Helper()
			rs, rec := testdb.Record(h.store)
			w, err := jobs.NewWorker(testdb.Public(rs), reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
			require.NoError(t, err)
			_, err = w.Drain(context.Background())
			require.NoError(t, err)
			return rec.Take()
		}
		reads := func(stmts []string) int { return testdb.Count(stmts, "limit_to <>") }

		newer, older := jobs.NewRegistry(), jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](newer, syncLimit(5)))
		require.NoError(t, jobs.Declare[accountSync](older, syncLimit(2)))
		for _, reg := range []*jobs.Registry{newer, older} {
			require.NoError(t, jobs.Declare[groupedExportA](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: "t"})))
			require.NoError(t, jobs.Declare[groupedExportB](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 3, Group: "exports", Key: "t"})))
		}
		require.Equal(t, 1, reads(start(newer)), "account_sync's scope, once; not the mixed group's")
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit)
		require.Equal(t, 1, semaphoreOf(t, h, "exports/t").Limit, "the group's kinds disagree: left alone")
		start(older)
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit, "the last start's")
		start(newer)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit)

		plain := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](plain))
		stmts := start(plain)
		require.NotEmpty(t, stmts)
		require.Zero(t, reads(stmts), "no concurrency limit: no statement for them")
	})
}
