package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md: "An override checks its numbers as a declaration
// does", and rounding "can only admit later, never earlier". SetOverride
// checked Per as given but stored it cut to the microsecond, so the workers
// applied a looser limit than the one checked (1 per 1.999µs became 1 per
// 1µs), or one that failed the check when read back and was silently
// ignored. A Per that is no whole number of microseconds is now refused,
// and nothing is stored.
func TestAnOverrideWhosePerIsNotWholeMicrosecondsIsRefused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, o := range []engine.Override{
			{Target: "S/a", To: 1, Per: 1999 * time.Nanosecond, Burst: 1},
			{Target: "S/b", To: 2, Per: 1999 * time.Nanosecond, Burst: 1},
		} {
			_, _, err := ratelimit.NewParams(o.To, o.Per, o.Burst)
			require.NoError(t, err, "the override's numbers are valid as given")
			err = s.SetOverride(ctx, o, t0)
			require.ErrorIs(t, err, ratelimit.ErrInvalid)
			require.ErrorContains(t, err, "whole number of microseconds")
		}
		list, err := s.ListOverrides(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		require.NoError(t, s.SetOverride(ctx, engine.Override{Target: "S/c", To: 1, Per: 2 * time.Microsecond, Burst: 1}, t0))
		list, err = s.ListOverrides(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		applied := list[0].Spec(spec(t, "S", 1, time.Second, 1))
		require.Equal(t, 2*time.Microsecond, applied.Per)
	})
}
