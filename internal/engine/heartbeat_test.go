package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: "A process whose heartbeat is older than 5 minutes is
// presumed dead". A live, registered process that heartbeats must be told
// it is alive, whatever its clock reads (here: the same instant twice, as a
// fake or coarse clock gives). On MySQL, which counts changed rows, it was
// told it had been reaped, registered again and left its old row (and its
// jobs) to be reaped.
func TestAHeartbeatAtTheInstantOfTheLastIsAlive(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		alive, err := s.Heartbeat(ctx, pid, engine.At(t0.Add(time.Minute)))
		require.NoError(t, err)
		require.True(t, alive)
		alive, err = s.Heartbeat(ctx, pid, engine.At(t0.Add(time.Minute)))
		require.NoError(t, err)
		require.True(t, alive, "a registered process was told it had been reaped")
	})
}
