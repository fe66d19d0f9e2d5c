package ui_test

import (
	"context"
	"errors"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// evil is a kind whose name, args and keys carry markup.
type evil struct {
	Note string `json:"note"`
	Key  string `json:"key"`
}

func (evil) Kind() string { return `evil<img src=x onerror=alert(1)>` }

type throttled struct {
	Account string `json:"account"`
}

func (throttled) Kind() string { return "throttled" }

type flaky struct{ N int }

func (flaky) Kind() string { return "flaky" }

type serial struct{ Account string }

func (serial) Kind() string { return "serial" }

// fixture is a store holding one job in each interesting state.
type fixture struct {
	store  *engine.Store
	reg    *jobs.Registry
	clock  *clock.Fake
	client *jobs.Client
	// Deferred is a throttled job that holds a slot; Parked one parked
	// behind it; Failed a job that used up its attempts; Evil a ready job
	// whose kind, args and key carry markup.
	Deferred, Parked, Failed, Evil, Blocked int64
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFixture(t testing.TB, s *engine.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{store: s, reg: jobs.NewRegistry(), clock: clock.NewFake(t0)}
	f.client = jobs.NewClient(testdb.Public(s), f.reg, jobs.ClientConfig{Clock: f.clock})
	require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[throttled]) error { return nil },
		jobs.RateLimit(ratelimit.Limit[throttled]{To: 6, Per: time.Minute, Key: func(a throttled) any { return a.Account }})))
	require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[flaky]) error {
		return errors.New("upstream said <script>alert(\"x\")</script>\ngoroutine 1 [running]:\nmain.work()")
	}, jobs.MaxAttempts(1)))
	require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[evil]) error { return nil },
		jobs.Queue("ev'il\"q")))
	require.NoError(t, jobs.Register(f.reg, func(context.Context, *jobs.Job[serial]) error { return nil },
		jobs.ConcurrencyLimit(concurrency.Limit[serial]{To: 1, Key: func(a serial) any { return a.Account }}), jobs.Queue("serial")))
	enqueue := func(a jobs.Args) int64 {
		res, err := f.client.Enqueue(ctx, a)
		require.NoError(t, err)
		return res.ID
	}
	key := `acme<script>alert(2)</script>`
	enqueue(throttled{Account: key})
	f.Deferred = enqueue(throttled{Account: key})
	for range 60 {
		f.Parked = enqueue(throttled{Account: key})
	}
	f.Failed = enqueue(flaky{N: 1})
	w, err := jobs.NewWorker(testdb.Public(s), f.reg, jobs.WorkerConfig{Clock: f.clock, Logger: quiet(), Horizon: time.Minute})
	require.NoError(t, err)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	f.Evil = enqueue(evil{Note: `</pre><script>alert(3)</script>"'&`, Key: "k"})
	enqueue(serial{Account: "a"})
	f.Blocked = enqueue(serial{Account: "a"})
	return f
}
