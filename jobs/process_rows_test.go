package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// badProcessNames are names no process row takes on every database: over
// 255 bytes (MySQL's VARCHAR(255) refuses it, or cuts it silently without
// STRICT_TRANS_TABLES), a NUL (PostgreSQL refuses it in text), bytes that
// are not UTF-8 (PostgreSQL and MySQL refuse them; SQLite stores them),
// and an escape sequence that `sluice processes` would print raw.
var badProcessNames = []string{strings.Repeat("n", 300), "worker\x00", "worker\xff", "worker\x1b[2J"}

// DESIGN.md: "Bad input gets a clear error, at the earliest point"; and
// one behaviour on every database. WorkerConfig.Name and
// dispatcher.Config.Name label the process row, and follow the rule of a
// key, as a queue's name does: NewWorker and dispatcher.New refuse one
// that breaks it, naming Name. They took any text, and Run then failed to
// register, or not, by database, with the database's own error.
func TestAProcessNameIsCheckedWhenTheProcessIsMade(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		for _, name := range badProcessNames {
			w, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Name: name, Logger: quiet(), Clock: h.clock})
			if err == nil {
				t.Errorf("NewWorker takes the Name %.20q; Run then says %v", name, runUntilRegistered(t, h, w.Run))
			} else {
				require.ErrorContains(t, err, "jobs: NewWorker: Name", "%.20q", name)
			}
			d, err := dispatcher.New(testdb.Public(h.store), dispatcher.Config{Name: name, Logger: quiet(), Clock: h.clock})
			if err == nil {
				t.Errorf("dispatcher.New takes the Name %.20q; Run then says %v", name, runUntilRegistered(t, h, d.Run))
			} else {
				require.ErrorContains(t, err, "dispatcher: New: Name", "%.20q", name)
			}
		}
		// A name of 255 bytes, not ASCII, registers everywhere.
		name := strings.Repeat("é", 127) + "w"
		w, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Name: name, Logger: quiet(), Clock: h.clock})
		require.NoError(t, err)
		require.NoError(t, runUntilRegistered(t, h, w.Run))
		d, err := dispatcher.New(testdb.Public(h.store), dispatcher.Config{Name: name, Logger: quiet(), Clock: h.clock})
		require.NoError(t, err)
		require.NoError(t, runUntilRegistered(t, h, d.Run))
	})
}

// The worker's process row keeps its queues joined with commas in a TEXT
// column, which holds 65,535 bytes on MySQL (and is unbounded on
// PostgreSQL and SQLite). A worker given 300 queues of 250 bytes
// (per-tenant queues, say) started on SQLite and PostgreSQL and failed at
// Run on MySQL with "Data too long for column 'queues'" (or, without
// STRICT_TRANS_TABLES, was registered with its list cut short). The list
// has a bound, jobs.MaxQueueListBytes, the same on every database: a list
// that fits it starts everywhere, and NewWorker refuses a longer one
// everywhere, naming Queues.
func TestAWorkersQueueListHasOneBoundOnEveryDatabase(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		newWorker := func(n, size int) (*jobs.Worker, error) {
			qs := make([]string, n)
			for i := range qs {
				qs[i] = fmt.Sprintf("tenant-%03d-", i)
				qs[i] += strings.Repeat("q", size-len(qs[i]))
			}
			return jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Queues: qs, Logger: quiet(), Clock: h.clock})
		}
		// 256 names of 255 bytes and 255 commas: the bound, exactly.
		require.Equal(t, jobs.MaxQueueListBytes, 256*255+255)
		w, err := newWorker(256, 255)
		require.NoError(t, err)
		require.NoError(t, runUntilRegistered(t, h, w.Run))
		ps, err := h.store.ListProcesses(context.Background())
		require.NoError(t, err)
		require.Empty(t, ps)

		for _, c := range []struct{ n, size int }{{257, 255}, {300, 250}} {
			_, err = newWorker(c.n, c.size)
			require.ErrorContains(t, err, fmt.Sprintf("jobs: NewWorker: Queues: the %d queues' names take %d bytes joined with commas; a worker's list takes at most 65535", c.n, c.n*c.size+c.n-1))
		}
	})
}

// runUntilRegistered runs run (a worker's or a dispatcher's Run) until its
// process is registered, then stops it and deregisters it, and returns
// Run's error (one that stopped it before it registered).
func runUntilRegistered(t *testing.T, h *harness, run func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-deadline:
			t.Fatal("the process neither registered nor stopped")
		case <-time.After(5 * time.Millisecond):
		}
		ps, err := h.store.ListProcesses(context.Background())
		require.NoError(t, err)
		if len(ps) > 0 {
			cancel()
			err := <-done
			for _, p := range ps {
				require.NoError(t, h.store.DeregisterProcess(context.Background(), p.ID))
			}
			return err
		}
	}
}
