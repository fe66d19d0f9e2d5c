package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// reviewDataBadProcessNames are names no process row takes on every
// database: over 255 bytes (MySQL's VARCHAR(255) refuses it, or cuts it
// silently without STRICT_TRANS_TABLES), a NUL (PostgreSQL refuses it in
// text), bytes that are not UTF-8 (PostgreSQL and MySQL refuse them;
// SQLite stores them), and an escape sequence that `sluice processes`
// would print raw.
var reviewDataBadProcessNames = []string{strings.Repeat("n", 300), "worker\x00", "worker\xff", "worker\x1b[2J"}

// DESIGN.md: "Bad input gets a clear error, at the earliest point"; and
// one behaviour on every database. WorkerConfig.Name and
// dispatcher.Config.Name ("labels the process row") are never checked:
// NewWorker and dispatcher.New take any text, and Run then fails to
// register, or not, by database — a 300-byte name starts on SQLite and
// PostgreSQL and fails on MySQL ("Data too long for column 'name'"); a
// NUL or a byte that is not UTF-8 starts on SQLite and fails on
// PostgreSQL (SQLSTATE 22021) — with the database's own error, naming
// neither the field nor the value. Expected: NewWorker and dispatcher.New
// refuse it, naming Name, as they refuse a bad queue name.
func TestReviewDataAProcessNameIsCheckedWhenTheProcessIsMade(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		for _, name := range reviewDataBadProcessNames {
			w, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Name: name, Logger: quiet(), Clock: h.clock})
			if err == nil {
				t.Errorf("NewWorker takes the Name %.20q; Run then says %v", name, reviewDataRunBriefly(t, h, w.Run))
			} else {
				require.ErrorContains(t, err, "Name", "%.20q", name)
			}
			d, err := dispatcher.New(testdb.Public(h.store), dispatcher.Config{Name: name, Logger: quiet(), Clock: h.clock})
			if err == nil {
				t.Errorf("dispatcher.New takes the Name %.20q; Run then says %v", name, reviewDataRunBriefly(t, h, d.Run))
			} else {
				require.ErrorContains(t, err, "Name", "%.20q", name)
			}
		}
	})
}

// The worker's process row keeps its queues joined with commas in a TEXT
// column, which holds 65,535 bytes on MySQL (and is unbounded on
// PostgreSQL and SQLite). Each queue name is checked (1 to 255 bytes),
// but not the list: a worker given 300 queues of 250 bytes (per-tenant
// queues, say) starts on SQLite and PostgreSQL and fails at Run on MySQL
// with "Data too long for column 'queues'" (and, on a server without
// STRICT_TRANS_TABLES, is registered with its list cut short, which
// `sluice processes` then shows). Expected: the worker starts on every
// database (the list is shortened for display, or the column is
// MEDIUMTEXT), or NewWorker refuses it on every database.
func TestReviewDataAWorkerOfManyLongQueuesStartsOnEveryDatabase(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		qs := make([]string, 300)
		for i := range qs {
			qs[i] = fmt.Sprintf("tenant-%03d-", i) + strings.Repeat("q", 239)
		}
		w, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Queues: qs, Logger: quiet(), Clock: h.clock})
		require.NoError(t, err)
		require.NoError(t, reviewDataRunBriefly(t, h, w.Run))
	})
}

// reviewDataRunBriefly runs run (a worker's or a dispatcher's Run) until
// its process is registered, then stops it, and returns Run's error
// (one that stopped it before it registered).
func reviewDataRunBriefly(t *testing.T, h *harness, run func(context.Context) error) error {
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

type hugePanic struct{ N int }

func (hugePanic) Kind() string { return "huge_panic" }

// Passing probe. guarantees.md: a handler that panics "fails that attempt
// with the panic and its stack", and a kept error is "at most 16 KiB, cut
// on a character boundary …, with each byte that is not valid UTF-8, and
// each NUL, written as \xNN". A panic whose value is 1 MiB of text with
// a NUL, bytes that are not UTF-8 and four-byte characters (a string, an
// error, a value of another type) is recorded on every database as the
// other errors are, and the job retried.
func TestReviewDataAHugeHostilePanicValueIsKeptAsText(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		head := "bad\x00value\xff\xfe 🔑 "
		huge := head + strings.Repeat("é🔑x", 1<<20/7)
		values := []any{huge, errors.New(huge), struct{ S string }{huge}}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[hugePanic]) error {
			panic(values[j.Args.N])
		}, jobs.MaxAttempts(2)))
		items := make([]jobs.Item, len(values))
		for i := range items {
			items[i] = jobs.Item{Args: hugePanic{N: i}}
		}
		res, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		out := h.drain(jobs.WorkerConfig{Concurrency: len(values)})
		require.Equal(t, len(values), out.Retried)
		for _, r := range res {
			j := h.job(r.ID)
			require.Equal(t, engine.StateScheduled, j.State)
			require.True(t, utf8.ValidString(j.LastError))
			require.NotContains(t, j.LastError, "\x00")
			require.Contains(t, j.LastError, `bad\x00value\xff\xfe 🔑 `)
			require.True(t, strings.HasSuffix(j.LastError, truncated), "cut and marked")
			require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated))
			as, err := h.store.Attempts(context.Background(), r.ID)
			require.NoError(t, err)
			require.Len(t, as, 1)
			require.Equal(t, j.LastError, as[0].Error)
		}
	})
}
