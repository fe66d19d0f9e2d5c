package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// A worker decides on snapshots of its budgets while other claims take
// turns on them and nothing is deferred; alone on its budgets, it stops
// after snapshotAlone snapshots and tries again after snapshotProbe
// claims; a deferral stops it at once.
func TestAWorkerDecidesOnSnapshotsWhileItsBudgetsAreShared(t *testing.T) {
	w := &Worker{budgetHint: []string{"k/a"}}
	shared := &engine.ClaimResult{Contended: true}
	alone := &engine.ClaimResult{}

	w.adaptSnapshot(alone, 0)
	require.True(t, w.snapshotHint, "the first hinted claim tries a snapshot")
	for range 10 {
		w.adaptSnapshot(shared, 0)
		require.True(t, w.snapshotHint, "other claims on the budgets: it keeps to snapshots")
	}
	for range snapshotAlone - 1 {
		w.adaptSnapshot(alone, 0)
		require.True(t, w.snapshotHint)
	}
	w.adaptSnapshot(shared, 0)
	require.True(t, w.snapshotHint, "a shared claim starts the count again")
	for range snapshotAlone {
		w.adaptSnapshot(alone, 0)
	}
	require.False(t, w.snapshotHint, "alone on its budgets: locked claims, one round trip fewer")
	for range snapshotProbe - 1 {
		w.adaptSnapshot(alone, 0)
		require.False(t, w.snapshotHint)
	}
	w.adaptSnapshot(alone, 0)
	require.True(t, w.snapshotHint, "it tries again")

	w.adaptSnapshot(shared, 1)
	require.False(t, w.snapshotHint, "a deferral: the budgets bind, and a snapshot would cost a round trip")
	w.budgetHint = nil
	w.snapshotIn = 0
	w.adaptSnapshot(alone, 0)
	require.False(t, w.snapshotHint, "no hint, no snapshot")
}
