package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// A backlog drains at To − Burst + 1 a second with default settings, for a
// small burst as for a large one, and no second holds more than To.
func TestABacklogDrainsAtTheDeclaredRate(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		for _, burst := range []int{2, 6} {
			claims, err := run(context.Background(), s, burst, 2)
			require.NoError(t, err)
			want := burst + 2*(limit.To-burst+1)
			require.Len(t, claims, want, "burst %d", burst)
			require.LessOrEqual(t, ratelimit.BusiestWindow(claims, time.Second), limit.To, "burst %d", burst)
			// The claims after the burst come one interval apart: the last
			// is two seconds after the burst's, give or take the claims'
			// own delays.
			span := claims[len(claims)-1].Sub(claims[burst-1])
			require.InDelta(t, 2*time.Second.Seconds(), span.Seconds(), 0.15, "burst %d: drained in %s", burst, span)
			if _, err := s.DB().Exec(context.Background(), "DELETE FROM sluice_budgets"); err != nil {
				t.Fatal(err)
			}
		}
	})
}
