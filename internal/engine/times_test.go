package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// A time a job must not run before is stored rounded up to the
// microsecond, never down (a claim compares it with its now rounded
// down), and the latest accepted, MaxRunAt, is stored as itself.
func TestMicrosNotBeforeRoundsUp(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{base, base.UnixMicro()},
		{base.Add(time.Nanosecond), base.UnixMicro() + 1},
		{base.Add(999 * time.Nanosecond), base.UnixMicro() + 1},
		{base.Add(time.Microsecond), base.UnixMicro() + 1},
		{time.Unix(0, -1), 0},
		{time.Unix(0, -1000), -1},
		{time.Unix(0, -1500), -1},
		{engine.MaxRunAt, engine.Micros(engine.MaxRunAt)},
	} {
		require.Equal(t, c.want, engine.MicrosNotBefore(c.t), "%s", c.t.Format(time.RFC3339Nano))
		require.False(t, engine.FromMicros(engine.MicrosNotBefore(c.t)).Before(c.t), "%s", c.t.Format(time.RFC3339Nano))
	}
	require.Zero(t, engine.MaxRunAt.Nanosecond()%1000, "MaxRunAt is a whole microsecond: rounding it up stays within it")
}
