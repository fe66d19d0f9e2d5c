package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// A promotion by the dispatcher whose commit lands and whose reply is
// lost: the tick fails, the jobs are ready all the same, and the next tick
// promotes nothing twice.
func TestALostPromotionReplyLosesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		s, db := lossy(base)
		db.lose = loseOnce("attempted_at, deferrals FROM sluice_jobs") // Promote's transaction
		client := jobs.NewClient(testdb.Public(base), registry(t), jobs.ClientConfig{Clock: c})
		for i := 0; i < 3; i++ {
			_, err := client.Enqueue(ctx, report{Period: "1h"}, jobs.Delay(time.Minute))
			require.NoError(t, err)
		}
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		c.Advance(time.Minute)
		_, err := d.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the reply was lost")
		require.Equal(t, 1, db.lostReplies())
		for _, j := range reports(t, base) {
			require.Equal(t, engine.StateReady, j.State)
		}
		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Promoted)
	})
}
