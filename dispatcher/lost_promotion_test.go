package dispatcher_test

import (
	"context"
	"errors"
	"sync/atomic"
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
		var lose atomic.Bool
		lose.Store(true)
		s := engine.New(base.Dialect(), &lostCommitDB{DB: base.DB(), lose: &lose})
		client := jobs.NewClient(testdb.Public(base), registry(t), jobs.ClientConfig{Clock: c})
		for i := 0; i < 3; i++ {
			_, err := client.Enqueue(ctx, report{Period: "1h"}, jobs.Delay(time.Minute))
			require.NoError(t, err)
		}
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		c.Advance(time.Minute)
		_, err := d.Tick(ctx)
		require.Error(t, err, "the reply was lost")
		require.False(t, lose.Load())
		for _, j := range reports(t, base) {
			require.Equal(t, engine.StateReady, j.State)
		}
		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Promoted)
	})
}

// lostCommitDB commits the first transaction after lose is set, and then
// reports a dropped connection.
type lostCommitDB struct {
	engine.DB
	lose *atomic.Bool
}

func (d *lostCommitDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lostCommitTx{Tx: tx, d: d}, nil
}

type lostCommitTx struct {
	engine.Tx
	d *lostCommitDB
}

func (t *lostCommitTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.d.lose.CompareAndSwap(true, false) {
		return errors.New("read tcp: connection reset by peer")
	}
	return nil
}
