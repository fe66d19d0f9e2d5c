package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
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
			// What the program prints agrees: no second from the first
			// claim holds more than To.
			for i, n := range perSecond(claims) {
				require.LessOrEqual(t, n, limit.To, "burst %d: second %d of %v", burst, i, perSecond(claims))
			}
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

// perSecond counts on the wall clock, as the limit does, whatever
// monotonic readings the times carry. (The case that made them disagree,
// the host's wall clock slewed or stepped between two claims, cannot be
// staged here; this holds the arithmetic: a time with a monotonic reading
// and one without, as read back from a database, bucket by their wall
// clocks, and stripping the readings changes no count.)
func TestPerSecondCountsOnTheWallClock(t *testing.T) {
	base := time.Now() // carries a monotonic reading
	claims := []time.Time{base, base.Add(999 * time.Millisecond), base.Add(time.Second).Round(0), base.Add(2500 * time.Millisecond)}
	require.Equal(t, []int{2, 1, 1}, perSecond(claims))
	for i := range claims {
		claims[i] = claims[i].Round(0)
	}
	require.Equal(t, []int{2, 1, 1}, perSecond(claims))
}
