package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// failNextWrite makes the next INSERT, UPDATE or DELETE fail once with a
// deadlock (testdb.Fault), and returns whether it did.
func failNextWrite(f *testdb.Faults) *bool {
	fired := new(bool)
	f.Observe = func(q string, _ []any) {
		head := strings.ToUpper(strings.TrimSpace(q))
		if *fired || !(strings.HasPrefix(head, "INSERT") || strings.HasPrefix(head, "UPDATE") || strings.HasPrefix(head, "DELETE")) {
			return
		}
		*fired = true
		f.FailOnce = q
	}
	return fired
}

// The store's writes that are one statement of their own — an operator's
// pause, resume or override, a process's registration, heartbeat and
// goodbye — failed at the first deadlock or, on SQLite, at the first busy
// timeout (another process's long transaction, a backup's BEGIN
// EXCLUSIVE, a migration: `sluice queues pause` said "database is locked
// (5) (SQLITE_BUSY)" after 10 s while `sluice retry` beside it waited the
// lock out), and a heartbeat that failed so brought its process closer to
// being presumed dead. They now run again, as the store's transactions
// do: a statement that failed so changed nothing.
func TestSingleStatementWritesRunAgainAfterARetryableFailure(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		step := func(name string, op func() error) {
			t.Helper()
			fired := failNextWrite(faults)
			require.NoError(t, op(), name)
			require.True(t, *fired, "%s: no write failed", name)
		}

		step("pause", func() error { return s.PauseQueue(ctx, "mail", t0) })
		qs, err := s.ListQueues(ctx)
		require.NoError(t, err)
		require.Equal(t, []engine.QueueInfo{{Name: "mail", Paused: true}}, qs)
		step("resume", func() error { return s.ResumeQueue(ctx, "mail", t0) })

		step("set override", func() error {
			return s.SetOverride(ctx, engine.Override{Target: "Stripe", To: 5, Per: time.Minute}, t0)
		})
		ovs, err := s.ListOverrides(ctx)
		require.NoError(t, err)
		require.Len(t, ovs, 1)
		step("clear override", func() error { return s.ClearOverride(ctx, "Stripe") })

		var pid int64
		step("register", func() error {
			var err error
			pid, err = s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "test", PID: 1}, engine.At(t0))
			return err
		})
		step("heartbeat", func() error {
			alive, err := s.Heartbeat(ctx, pid, engine.At(t0.Add(time.Minute)))
			require.True(t, alive)
			return err
		})
		step("deregister", func() error { return s.DeregisterProcess(ctx, pid) })
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Empty(t, ps)
	})
}
