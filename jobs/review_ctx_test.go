package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// runAgainUntilRegistered runs w.Run until the worker registered a process id
// other than before, then cancels it and returns what Run returned, or
// the panic it raised as an error.
func runAgainUntilRegistered(t *testing.T, w *jobs.Worker, before int64) (err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("Run panicked: %v", p)
			}
		}()
		done <- w.Run(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for w.ProcessID() == before && time.Now().Before(deadline) {
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// A worker whose Run returned (its context ended: a leader lost its
// lease, a service restarted its loop) may be Run again, or refuse to with
// an error; it must not panic, which would take the whole process down.
func TestRunningAWorkerAgainAfterItStoppedDoesNotPanic(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, PollInterval: time.Second})
		require.NoError(t, runAgainUntilRegistered(t, w, 0), "first Run")
		first := w.ProcessID()
		require.NotZero(t, first)
		err := runAgainUntilRegistered(t, w, first)
		if err != nil {
			require.NotContains(t, err.Error(), "panicked", "a second Run of a stopped worker panics")
		}
	})
}
