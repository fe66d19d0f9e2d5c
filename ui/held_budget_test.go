package ui_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/ui"
)

// A budget held back past what its times reach (an upstream's wait past
// 2262) admits nothing again: its pages say "never", as explain gives no
// start, where they showed an admission in the year 2262.
func TestABudgetHeldForGoodShowsNeverAsItsNextAdmission(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		q, args := s.SQL().SaveBudgets([]engine.BudgetRow{{Name: "held/for-good", TAT: ratelimit.Never,
			IntervalNS: int64(time.Second), Burst: 1, UpdatedAt: engine.Micros(f.clock.Now())}})
		_, err := s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)
		c := serve(t, f, "", ui.Options{})
		for _, p := range []string{"/budgets", "/budget?key=held/for-good"} {
			code, body := c.get(p)
			require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
			require.Contains(t, body, "held/for-good", p)
			require.Contains(t, body, ">never<", p)
			require.NotContains(t, body, "2262", p)
		}
	})
}
