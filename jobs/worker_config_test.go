package jobs_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// NewWorker refuses settings that would hammer the database or run jobs
// twice, naming the field and its value; zero still means the default.
func TestNewWorkerRefusesNonsenseSettings(t *testing.T) {
	s, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	reg := jobs.NewRegistry()
	newWorker := func(cfg jobs.WorkerConfig) error {
		cfg.Logger = quiet()
		_, err := jobs.NewWorker(s, reg, cfg)
		return err
	}

	for _, c := range []struct {
		cfg  jobs.WorkerConfig
		want string
	}{
		{jobs.WorkerConfig{Concurrency: -1}, "Concurrency is -1; it must be from 1 to 10000 (MaxConcurrency), or 0 for the default (10)"},
		// Run would size its results by it: 1<<40 kills the process with
		// "out of memory", and a claim of more than SQLite binds fails.
		{jobs.WorkerConfig{Concurrency: jobs.MaxConcurrency + 1}, "Concurrency is 10001; it must be from 1 to 10000 (MaxConcurrency)"},
		{jobs.WorkerConfig{Concurrency: 1 << 40}, "Concurrency is 1099511627776; it must be from 1 to 10000"},
		{jobs.WorkerConfig{Queues: []string{"mail\x00"}}, "queue name"},
		{jobs.WorkerConfig{PollInterval: -time.Millisecond}, "PollInterval is -1ms; it must be positive, or 0 for the default"},
		{jobs.WorkerConfig{PollInterval: time.Microsecond}, "PollInterval is 1µs; it must be at least 1ms"},
		{jobs.WorkerConfig{ShutdownTimeout: -time.Second}, "ShutdownTimeout is -1s"},
		{jobs.WorkerConfig{HeartbeatInterval: -time.Second}, "HeartbeatInterval is -1s"},
		{jobs.WorkerConfig{HeartbeatInterval: time.Nanosecond}, "HeartbeatInterval is 1ns; it must be at least 1ms"},
		{jobs.WorkerConfig{DeadAfter: -time.Minute}, "DeadAfter is -1m0s"},
		{jobs.WorkerConfig{Horizon: -time.Minute}, "Horizon is -1m0s"},
		{jobs.WorkerConfig{OverrideRefresh: -time.Second}, "OverrideRefresh is -1s"},
		{jobs.WorkerConfig{OverrideRefresh: time.Microsecond}, "OverrideRefresh is 1µs; it must be at least 1ms"},
		{jobs.WorkerConfig{MaxRetryAfter: -time.Second}, "MaxRetryAfter is -1s"},
		{jobs.WorkerConfig{GiveBackFor: -time.Second}, "GiveBackFor is -1s"},
		// Below the heartbeat: the worker's own process would be reaped.
		{jobs.WorkerConfig{DeadAfter: 30 * time.Second}, "DeadAfter is 30s; it must be at least 3 × HeartbeatInterval (1m0s)"},
		{jobs.WorkerConfig{HeartbeatInterval: 10 * time.Second, DeadAfter: 29 * time.Second}, "DeadAfter is 29s; it must be at least 3 × HeartbeatInterval (10s)"},
		// After defaults: a longer heartbeat needs a longer DeadAfter than the default.
		{jobs.WorkerConfig{HeartbeatInterval: 2 * time.Minute}, "DeadAfter is 5m0s (the default); it must be at least 3 × HeartbeatInterval (2m0s)"},
		// No overflow in 3 × HeartbeatInterval.
		{jobs.WorkerConfig{HeartbeatInterval: 1 << 62}, "DeadAfter is 5m0s (the default); it must be at least 3 × HeartbeatInterval"},
	} {
		err := newWorker(c.cfg)
		require.Error(t, err, "%+v", c.cfg)
		require.Contains(t, err.Error(), "jobs: NewWorker: "+c.want)
	}

	for _, cfg := range []jobs.WorkerConfig{
		{}, // every default
		{HeartbeatInterval: 10 * time.Second, DeadAfter: 30 * time.Second},
		{HeartbeatInterval: 2 * time.Minute, DeadAfter: 6 * time.Minute},
		{DeadAfter: 3 * jobs.DefaultHeartbeatInterval},
		{PollInterval: jobs.MinInterval, HeartbeatInterval: jobs.MinInterval, OverrideRefresh: jobs.MinInterval},
		{JobTimeout: -1}, // no timeout
		{Concurrency: jobs.MaxConcurrency},
	} {
		require.NoError(t, newWorker(cfg), "%+v", cfg)
	}
}
