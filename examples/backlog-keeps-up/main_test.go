package main

import (
	"context"
	"github.com/sluicequeue/sluice/internal/engine"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// A backlog drains at To − Burst + 1 a second with default settings, for a
// small burst as for a large one, and no second holds more than To.
func TestABacklogDrainsAtTheDeclaredRate(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		for _, burst := range []int{2, 6} {
			claims, err := run(context.Background(), s, burst, 2)
			require.NoError(t, err)
			want := burst + 2*(limit.To-burst+1)
			require.Len(t, claims, want, "burst %d", burst)
			require.LessOrEqual(t, ratelimit.BusiestWindow(claims, time.Second), limit.To, "burst %d", burst)
			// The claims after the burst come one interval apart: the last
			// is two seconds after the burst's, plus the claims' own delays
			// (more on a loaded machine; benchmarks measure the precision).
			// Paced by the dispatcher's 1 s poll instead, it would take 9 s.
			span := claims[len(claims)-1].Sub(claims[burst-1])
			require.GreaterOrEqual(t, span, 2*time.Second-50*time.Millisecond, "burst %d: drained in %s, faster than the limit", burst, span)
			require.Less(t, span, 3*time.Second, "burst %d: drained in %s, not at the limit's pace", burst, span)
			if _, err := engine.From(s).DB().Exec(context.Background(), "DELETE FROM sluice_budgets"); err != nil {
				t.Fatal(err)
			}
		}
	})
}
