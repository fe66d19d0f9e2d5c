package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/guarantees.md says a worker run again once Run
// returned "registers as a new process and starts afresh", and
// docs/concurrency.md that "each key's limit is that of the last start or
// enqueue to declare one" (a worker's start declares its To on the keys of
// its scopes). A Drain's first round declares them "as Run's start does".
// It used to remember that it walked each scope (slotDeclarations.
// walked), so its second Drain (or Run) declared nothing: an older
// version's start or enqueue in between kept its To on the key.
func TestADrainOfAWorkerAgainDeclaresItsLimitAgain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		h.enqueue(accountSync{Account: "a"})
		worker := func(to int) *jobs.Worker {
			t.Helper()
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Declare[accountSync](reg, syncLimit(to)))
			w, err := jobs.NewWorker(testdb.Public(h.store), reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
			require.NoError(t, err)
			return w
		}
		drain := func(w *jobs.Worker) {
			t.Helper()
			_, err := w.Drain(context.Background())
			require.NoError(t, err)
		}
		newer, older := worker(5), worker(2)
		drain(newer)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit)
		drain(older)
		require.Equal(t, 2, semaphoreOf(t, h, "account_sync/a").Limit, "the last start's")
		drain(newer)
		require.Equal(t, 5, semaphoreOf(t, h, "account_sync/a").Limit,
			"the newer worker drained again: its start declares its limit again")
	})
}

// The same with Run: a worker run again (a leader that won its lease
// back) after an older version's worker started in between leaves the
// older To on its keys until a new job of each key is enqueued.
func TestAWorkerRunAgainDeclaresItsLimitAgain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[accountSync](h.reg, syncLimit(2)))
		h.enqueue(accountSync{Account: "a"})
		newReg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](newReg, syncLimit(5)))
		newer, err := jobs.NewWorker(testdb.Public(h.store), newReg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
		require.NoError(t, err)
		limit := func() int { return semaphoreOf(t, h, "account_sync/a").Limit }

		stop := h.run(newer)
		require.Eventually(t, func() bool { return limit() == 5 }, 20*time.Second, time.Millisecond, "the first Run declares 5")
		stop()

		oldReg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[accountSync](oldReg, syncLimit(2)))
		older, err := jobs.NewWorker(testdb.Public(h.store), oldReg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = older.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, limit(), "the older version's start")

		stop = h.run(newer)
		defer stop()
		require.Eventually(t, func() bool { return limit() == 5 }, 5*time.Second, 5*time.Millisecond,
			"the newer worker's second Run declares its limit again (limit is %d)", limit())
	})
}
