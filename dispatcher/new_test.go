package dispatcher_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// New refuses settings that would hammer the database or reap live
// processes, naming the field and its value; zero still means the default.
func TestNewRefusesNonsenseSettings(t *testing.T) {
	s, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "d.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	newDispatcher := func(cfg dispatcher.Config) error {
		cfg.Logger = quiet()
		_, err := dispatcher.New(s, cfg)
		return err
	}

	for _, c := range []struct {
		cfg  dispatcher.Config
		want string
	}{
		{dispatcher.Config{Interval: -time.Second}, "Interval is -1s; it must be positive, or 0 for the default"},
		{dispatcher.Config{Interval: time.Microsecond}, "Interval is 1µs; it must be at least 1ms"},
		{dispatcher.Config{BatchSize: -5}, "BatchSize is -5; it must be from 1 to 10000 (MaxBatchSize), or 0 for the default (500)"},
		// A promotion lists its jobs in its statements: SQLite binds at
		// most 32,766 values in one.
		{dispatcher.Config{BatchSize: dispatcher.MaxBatchSize + 1}, "BatchSize is 10001; it must be from 1 to 10000 (MaxBatchSize)"},
		{dispatcher.Config{BatchSize: 40000}, "BatchSize is 40000; it must be from 1 to 10000"},
		{dispatcher.Config{Horizon: -time.Minute}, "Horizon is -1m0s"},
		{dispatcher.Config{HeartbeatInterval: -time.Second}, "HeartbeatInterval is -1s"},
		{dispatcher.Config{HeartbeatInterval: time.Nanosecond}, "HeartbeatInterval is 1ns; it must be at least 1ms"},
		{dispatcher.Config{DeadAfter: -time.Second}, "DeadAfter is -1s"},
		{dispatcher.Config{Maintenance: dispatcher.Maintenance{Retention: -time.Hour}}, "Maintenance.Retention is -1h0m0s"},
		{dispatcher.Config{DeadAfter: time.Minute}, "DeadAfter is 1m0s; it must be at least 3 × HeartbeatInterval (1m0s)"},
		{dispatcher.Config{HeartbeatInterval: 5 * time.Minute}, "DeadAfter is 5m0s (the default); it must be at least 3 × HeartbeatInterval (5m0s)"},
	} {
		err := newDispatcher(c.cfg)
		require.Error(t, err, "%+v", c.cfg)
		require.Contains(t, err.Error(), "dispatcher: New: "+c.want)
	}

	for _, cfg := range []dispatcher.Config{
		{}, // every default
		{HeartbeatInterval: 10 * time.Second, DeadAfter: 30 * time.Second},
		{DeadAfter: 3 * dispatcher.DefaultHeartbeatInterval},
		{Interval: jobs.MinInterval, HeartbeatInterval: jobs.MinInterval},
		{BatchSize: dispatcher.MaxBatchSize},
	} {
		require.NoError(t, newDispatcher(cfg), "%+v", cfg)
	}
}
