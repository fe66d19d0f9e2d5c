package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type noop struct{ N int }

func (noop) Kind() string { return "noop" }

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (email) Kind() string { return "email" }

// harness is one backend's store with a fake clock, a registry and a
// client.
type harness struct {
	t      *testing.T
	store  *engine.Store
	clock  *clock.Fake
	reg    *jobs.Registry
	client *jobs.Client
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// each runs fn per backend with a fresh harness.
func each(t *testing.T, fn func(t *testing.T, h *harness)) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		fn(t, &harness{t: t, store: s, clock: c, reg: reg, client: jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})})
	})
}

func (h *harness) worker(cfg jobs.WorkerConfig) *jobs.Worker {
	h.t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = h.clock
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	w, err := jobs.NewWorker(testdb.Public(h.store), h.reg, cfg)
	require.NoError(h.t, err)
	return w
}

func (h *harness) drain(cfg jobs.WorkerConfig) jobs.DrainResult {
	h.t.Helper()
	res, err := h.worker(cfg).Drain(context.Background())
	require.NoError(h.t, err)
	return res
}

func (h *harness) job(id int64) *engine.JobInfo {
	h.t.Helper()
	j, err := h.store.GetJob(context.Background(), id)
	require.NoError(h.t, err)
	return j
}

func (h *harness) enqueue(args jobs.Args, opts ...jobs.EnqueueOption) int64 {
	h.t.Helper()
	res, err := h.client.Enqueue(context.Background(), args, opts...)
	require.NoError(h.t, err)
	return res.ID
}

// run starts a worker's Run and returns a function that stops it and
// waits for it to return.
func (h *harness) run(w *jobs.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(h.t, err)
		case <-time.After(30 * time.Second):
			h.t.Fatal("worker did not stop")
		}
	}
}

// receive reads n values from ch, failing if they do not come.
func receive[T any](t *testing.T, ch <-chan T, n int) []T {
	t.Helper()
	out := make([]T, 0, n)
	deadline := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-deadline:
			t.Fatalf("got %d of %d events", len(out), n)
		}
	}
	return out
}

func systemClock() clock.Clock { return clock.System() }

// assertNoErr reports an error from a goroutine without stopping it.
func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// tickAndDrain promotes what is due on the harness's clock, then drains.
func tickAndDrain(t *testing.T, h *harness) jobs.DrainResult {
	t.Helper()
	d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
	_, err := d.Tick(context.Background())
	require.NoError(t, err)
	return h.drain(jobs.WorkerConfig{})
}

// newDispatcher makes a dispatcher, failing the test on an error.
func newDispatcher(t testing.TB, s *engine.Store, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(testdb.Public(s), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func backends(t *testing.T) []testdb.Backend { return testdb.Backends(t) }
