package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
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

// A budget's time (nanoseconds since 1970) saturates past what an int64
// holds instead of wrapping round: 2263 is the end of a budget's times
// (ratelimit.Never), not 1677, and 1600 is the earliest, not 2184.
func TestNanosSaturatesInsteadOfWrapping(t *testing.T) {
	last := time.Unix(0, math.MaxInt64)
	require.Equal(t, int64(math.MaxInt64), engine.Nanos(last))
	require.Equal(t, int64(math.MaxInt64), engine.Nanos(last.Add(time.Nanosecond)))
	require.Equal(t, ratelimit.Never, engine.Nanos(time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, ratelimit.Never, engine.Nanos(engine.MaxRunAt))
	require.Equal(t, int64(math.MinInt64), engine.Nanos(time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)))
	now := time.Date(2026, 3, 1, 12, 0, 0, 1, time.UTC)
	require.Equal(t, now.UnixNano(), engine.Nanos(now))
	require.False(t, engine.MaxLimitedRunAt.After(last), "a job at MaxLimitedRunAt is within a budget's times")
	require.Less(t, engine.Nanos(engine.FromMicros(engine.MicrosNotBefore(engine.MaxLimitedRunAt))), ratelimit.Never)
}
