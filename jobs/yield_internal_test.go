package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// A claim that left rate-limited jobs to the next one, because another
// claim held their budget, keeps the window: it says nothing of the
// budgets.
func TestAClaimThatYieldedKeepsTheWindow(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{Concurrency: 100}, window: firstCandidates}
	w.adaptWindow(&engine.ClaimResult{Jobs: []*engine.Job{{}}, Yielded: 5, MoreLimited: true}, firstCandidates)
	require.Equal(t, firstCandidates, w.window)
	w.adaptWindow(&engine.ClaimResult{Jobs: []*engine.Job{{}}, MoreLimited: true}, firstCandidates)
	require.Equal(t, 100, w.window, "without: it widens")
}
