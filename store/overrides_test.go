package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

func TestOverridesAreSetListedAndClearedThroughThePublicStore(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		require.NoError(t, s.SetOverride(ctx, store.Override{Target: "Stripe/Account/7", To: 200, Per: time.Minute, Burst: 20}))
		err := s.SetOverride(ctx, store.Override{Target: "Stripe/Account/8", To: 5, Per: time.Minute, Burst: 6})
		require.ErrorContains(t, err, "Burst", "checked as a declaration is")
		// A pausing override (To 0) was stored whatever its burst.
		for _, burst := range []int{-1, ratelimit.MaxTo + 1} {
			err = s.SetOverride(ctx, store.Override{Target: "Stripe/Account/9", To: 0, Per: time.Minute, Burst: burst})
			require.ErrorIs(t, err, ratelimit.ErrInvalid, "burst %d", burst)
			require.ErrorContains(t, err, "Burst is", "burst %d", burst)
		}
		os, err := s.Overrides(ctx)
		require.NoError(t, err)
		require.Len(t, os, 1)
		require.Equal(t, "Stripe/Account/7", os[0].Target)
		require.Equal(t, 200, os[0].To)
		require.Equal(t, 20, os[0].Burst)
		require.NoError(t, s.ClearOverride(ctx, "Stripe/Account/7"))
		require.True(t, errors.Is(s.ClearOverride(ctx, "Stripe/Account/7"), store.ErrNoOverride))
		os, err = s.Overrides(ctx)
		require.NoError(t, err)
		require.Empty(t, os)
	})
}
