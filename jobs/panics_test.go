package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// The app's code the worker calls beside the handler — a kind's Backoff,
// the methods of the error a handler returns, the release callbacks
// middleware registers — must not take the worker process down when it
// panics: the jobs it runs would be lost with it, and the job whose code
// panicked would come back after DeadAfter and take down the next worker.

// guarantees.md, "Nothing lost": "A handler that panics fails that attempt
// with the panic and its stack; the process carries on. So does a kind's
// own code that panics decoding its args (an UnmarshalJSON); a worker hook
// (jobs.Hooks) that panics is logged with its stack and changes nothing."
//
// A kind's Backoff (jobs.Backoff) is the kind's own code too, called by the
// worker after every failed attempt: it was called outside any recover, and
// one that panicked (here the classic off-by-one on a table of delays) took
// the whole worker process down, with every job it ran; the failed job
// stayed running, came back after DeadAfter, and took down the next worker
// that ran it. The panic killed the process, so the worker runs in a child
// process.
func TestABackoffThatPanicsDoesNotTakeTheWorkerDown(t *testing.T) {
	inChildProcess(t, func(t *testing.T, h *harness) {
		delays := []time.Duration{10 * time.Second} // meant for attempt 1
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			return errors.New("upstream 503")
		}, jobs.Backoff(func(attempt int) time.Duration { return delays[attempt] }), jobs.MaxAttempts(5)))
		id := h.enqueue(waitJob{})
		stop := h.run(h.worker(jobs.WorkerConfig{PollInterval: time.Hour}))
		defer stop()
		require.Eventually(t, func() bool { return h.job(id).State != engine.StateRunning && h.job(id).Attempt == 1 }, 20*time.Second, 5*time.Millisecond)
		j := h.job(id)
		require.NotEqual(t, engine.StateReady, j.State, "the attempt is not lost")
	})
}

// What a Backoff that panics does instead: the attempt fails as the
// handler's error says, and is retried after the default backoff (2 s
// after the first attempt, ±10%); the panic is logged with its stack.
func TestABackoffThatPanicsRetriesAfterTheDefaultBackoff(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		delays := []time.Duration{10 * time.Second} // meant for attempt 1
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			return errors.New("upstream 503")
		}, jobs.Backoff(func(attempt int) time.Duration { return delays[attempt] }), jobs.MaxAttempts(5)))
		id := h.enqueue(waitJob{})
		logs := &logLines{}
		res := drainGuarded(t, h.worker(jobs.WorkerConfig{Logger: logs.logger()}))
		require.Equal(t, 1, res.Retried)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "upstream 503", j.LastError, "the handler's error stands")
		wait := j.RunAt.Sub(t0)
		require.True(t, wait >= 1800*time.Millisecond && wait <= 2200*time.Millisecond, "the default backoff, 2 s ±10%%: %s", wait)
		line := logs.find(t, "Backoff panicked")
		require.Contains(t, line, "index out of range")
		require.Contains(t, line, "panics_test.go", "with its stack")
	})
}

// A handler that returns a nil pointer of an error type (var e *MyErr;
// return e) returns a non-nil error whose Error method may panic on its
// nil receiver: the worker read it outside any recover, to keep it with
// the job, and the panic took the process down. The attempt fails instead,
// with the panic.
func TestAHandlersErrorThatPanicsWhenReadFailsItsAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			var err *nilUnsafeError
			return err
		}, jobs.MaxAttempts(5)))
		id := h.enqueue(waitJob{})
		logs := &logLines{}
		res := drainGuarded(t, h.worker(jobs.WorkerConfig{Logger: logs.logger()}))
		require.Equal(t, 1, res.Retried)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Contains(t, j.LastError, "(*jobs_test.nilUnsafeError) whose methods panicked")
		require.Contains(t, j.LastError, "nil pointer dereference")
		require.Contains(t, logs.find(t, "error panicked"), "panics_test.go", "logged with its stack")
	})
}

// nilUnsafeError's Error panics on a nil receiver.
type nilUnsafeError struct{ msg string }

func (e *nilUnsafeError) Error() string { return e.msg }

// guarantees.md, "Graceful shutdown": the worker "releases the ones still
// running back to ready, giving back the attempt their claim counted";
// observability.md: "jobs.OnRelease(ctx, f) calls f if the worker, shutting
// down, releases the job".
//
// The release callbacks middleware registers (otelsluice ends its span
// there) were called by the shutdown itself, unguarded and before the
// release was written: one that panicked took Run (the process) down, and
// the job stayed running for a process that was gone until another
// presumed it lost. The release is written first now, and the callback's
// panic is logged with its stack.
func TestAPanickingOnReleaseCallbackStillReleasesTheJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{}, 1)
		never := make(chan struct{}) // the handler ignores its context until the test ends
		t.Cleanup(func() { close(never) })
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error {
			started <- struct{}{}
			<-never
			return nil
		}))
		mw := func(ctx context.Context, _ jobs.JobInfo, next func(context.Context) error) error {
			jobs.OnRelease(ctx, func() { panic("span exporter is gone") })
			return next(ctx)
		}
		id := h.enqueue(noop{})
		logs := &logLines{}
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour, JobTimeout: -1, Middleware: []jobs.Middleware{mw}, Logger: logs.logger()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan any, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- fmt.Sprintf("Run panicked: %v", r)
				}
			}()
			if err := w.Run(ctx); err != nil {
				done <- err
				return
			}
			done <- nil
		}()
		<-started
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultShutdownTimeout))
			h.clock.Advance(jobs.DefaultShutdownTimeout)
			<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultShutdownTimeout + time.Second))
			h.clock.Advance(time.Second)
		}()
		cancel()
		select {
		case v := <-done:
			assert.Nil(t, v, "Run stops cleanly")
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not stop")
		}
		j := h.job(id)
		require.Equal(t, engine.StateReady, j.State, "the job still running at shutdown is released (it is %s)", j.State)
		require.Equal(t, 0, j.Attempt)
		line := logs.find(t, "release callback")
		require.Contains(t, line, "span exporter is gone")
		require.Contains(t, line, "panics_test.go", "with its stack")
	})
}

// A release callback registered once the job was released (by a handler
// still running past its shutdown) is called at once, in a goroutine of its
// own: one that panicked there took the process down, past any recover.
// It runs in a child process for that reason.
func TestAReleaseCallbackRegisteredAfterTheReleaseThatPanicsIsLogged(t *testing.T) {
	inChildProcess(t, func(t *testing.T, h *harness) {
		started, late := make(chan struct{}, 1), make(chan struct{})
		released := make(chan struct{})
		never := make(chan struct{})
		t.Cleanup(func() { close(never) })
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[noop]) error {
			jobs.OnRelease(ctx, func() { close(released) })
			started <- struct{}{}
			<-released
			jobs.OnRelease(ctx, func() { panic("registered too late") })
			close(late)
			<-never
			return nil
		}))
		id := h.enqueue(noop{})
		logs := &logLines{}
		stop := h.run(h.worker(jobs.WorkerConfig{PollInterval: time.Hour, JobTimeout: -1, Logger: logs.logger()}))
		<-started
		stopPastItsTimeout(h, stop)
		<-late
		line := logs.find(t, "release callback")
		require.Contains(t, line, "registered too late")
		require.Equal(t, engine.StateReady, h.job(id).State)
	})
}

// drainGuarded drains w, failing the test (rather than crashing the test
// binary) when the drain panics.
func drainGuarded(t *testing.T, w *jobs.Worker) (res jobs.DrainResult) {
	t.Helper()
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Drain panicked: %v", r)
			}
		}()
		var err error
		res, err = w.Drain(context.Background())
		require.NoError(t, err)
	}()
	return res
}

// logLines keeps the lines a worker logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// Write takes one record, as slog's handlers write them.
func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

// find returns the first line that holds s, waiting for it a while (a
// goroutine of the worker may log it).
func (l *logLines) find(t *testing.T, s string) string {
	t.Helper()
	var found string
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			if strings.Contains(line, s) {
				found = line
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond, "no log line holds %q", s)
	return found
}

// childURLEnv names, in a child process of inChildProcess, its database.
const childURLEnv = "SLUICE_TEST_CHILD_URL"

// inChildProcess runs fn once per backend, each time in a child process
// of the test binary that runs only the calling test, with a harness on a
// fresh database of the parent's (dropped when the parent's test ends,
// even if the child died): for tests of a panic that, unguarded, takes the
// whole process down, which the parent reports as a failure.
func inChildProcess(t *testing.T, fn func(t *testing.T, h *harness)) {
	if u := os.Getenv(childURLEnv); u != "" {
		s, err := testdb.OpenURL(context.Background(), u)
		require.NoError(t, err)
		defer s.Close()
		_, err = s.MigrateUp(context.Background(), 0)
		require.NoError(t, err)
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		fn(t, &harness{t: t, store: s, clock: c, reg: reg, client: jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})})
		return
	}
	name := t.Name()
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), childURLEnv+"="+b.URL(t))
			out, err := cmd.CombinedOutput()
			if err != nil {
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				t.Fatalf("the child process failed or died (%v):\n%s", err, strings.Join(lines[:min(len(lines), 12)], "\n"))
			}
		})
	}
}
