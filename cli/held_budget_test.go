package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// A budget held back past what its times reach (an upstream's wait past
// 2262) admits nothing again: budgets and stats say "never" (null in
// JSON), as explain gives no start, where they gave an admission in 2262.
func TestABudgetHeldForGoodIsListedAsAdmittingNever(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			q, args := s.SQL().SaveBudgets([]engine.BudgetRow{{Name: "held/for-good", TAT: ratelimit.Never,
				IntervalNS: int64(time.Second), Burst: 1, UpdatedAt: engine.Micros(time.Now())}})
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)

			for _, cmd := range []string{"budgets", "stats"} {
				code, out, stderr := run(t, cmd, db)
				require.Equal(t, 0, code, stderr)
				require.Regexp(t, `held/for-good\s.*\snever\n`, out, cmd)
				require.NotContains(t, out, "2262", cmd)
			}
			code, out, stderr := run(t, "budgets", "--json", db)
			require.Equal(t, 0, code, stderr)
			var listed []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &listed))
			require.Len(t, listed, 1)
			require.Contains(t, listed[0], "next_admission")
			require.Nil(t, listed[0]["next_admission"], strings.TrimSpace(out))
		})
	}
}
