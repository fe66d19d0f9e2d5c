package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Review of today's changes (e2ee8cb..main).

// docs/guarantees.md: "A promotion waits for no such lock either ... a
// due job that needs a slot of a key another transaction holds is left
// due, and promoted at a tick after that transaction ends; the others,
// unlimited ones too, are promoted at once". The promotion takes one batch
// of due jobs, soonest first (LockDue), and leaves the held key's due;
// the next promotion takes the same batch again, and leaves it again. So
// a batch's worth of due jobs of one key an app's open transaction holds
// (jobs scheduled for one time, retries of one customer's jobs) stands in
// front of every job due after them, unlimited ones too, for as long as
// the app's transaction stays open; and the dispatcher, seeing a batch
// that was not full (Promote counts only the promoted), does not even
// tick again at once. Batch 2 here; the dispatcher's default is 500.
func TestReviewDueJobsOfAHeldKeyHoldBackEveryJobDueAfterThem(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		c1 := concJob("c", 1, time.Minute)
		c1.RunAt = at(time.Hour)
		c2 := concJob("c", 1, time.Minute)
		c2.RunAt = at(time.Hour)
		u := job("k", "default", 0)
		u.RunAt = at(time.Hour + time.Second)
		ids := enqueue(t, s, t0, c1, c2, u)

		a := app()
		tx := a.begin(t)
		_, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
		require.NoError(t, err)

		var promoted int
		returned, err := returnsWhileOpen(t, func() error {
			for tick := range 5 {
				n, _, err := s.Promote(ctx, engine.At(at(time.Hour+time.Duration(2+tick)*time.Second)), 2)
				if err != nil {
					return err
				}
				promoted += n
			}
			return nil
		}, tx.rollback)
		require.NoError(t, err)
		require.True(t, returned, "the promotions waited for the app's transaction")
		require.Equal(t, engine.StateScheduled, state(t, s, ids[0]).State, "c's due jobs are left due")
		require.Equal(t, engine.StateReady, state(t, s, ids[2]).State,
			"unlimited job u, due for 5 s, is not promoted by five promotions while the app's transaction holds c (promoted %d)", promoted)
	})
}
