package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
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

// After a claim that left jobs whose budget another claim held, the worker
// claims again after MinInterval, unless every slot is taken: then it
// waits for one to free, as after any full claim, instead of waking each
// MinInterval with nothing to claim for.
func TestAClaimThatYieldedIsFollowedSoonUnlessTheSlotsAreFull(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{PollInterval: 5 * time.Second}, clock: clock.NewFake(time.Unix(0, 0)),
		freed: make(chan struct{}, 1), yielded: true}
	pause, freed := w.pause(false)
	require.Equal(t, MinInterval, pause)
	require.Nil(t, freed)
	pause, freed = w.pause(true)
	require.Equal(t, 5*time.Second, pause, "full: the next slot to free wakes it")
	require.NotNil(t, freed)
	w.yielded = false
	pause, _ = w.pause(false)
	require.Equal(t, 5*time.Second, pause)
}
