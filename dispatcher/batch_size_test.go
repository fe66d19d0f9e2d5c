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
)

// A tick at the largest BatchSize New accepts promotes a whole batch on
// every database. A promotion lists the jobs it moves in its statements,
// and those it blocks (no concurrency slot free) go in one bulk update of
// ten bound values a job on SQLite: 10,000 blocked jobs bound 100,000,
// past SQLite's 32,766, and every tick failed with "too many SQL
// variables" while the due jobs stayed due. Here one job of a key with one
// slot becomes ready and the other 9,999 are blocked.
func TestATickAtTheLargestBatchSizePromotesAWholeBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		jobs := make([]engine.NewJob, dispatcher.MaxBatchSize)
		for i := range jobs {
			jobs[i] = engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, RunAt: t0.Add(time.Second),
				Conc: &engine.Conc{Key: "c", To: 1, Duration: time.Hour}}
		}
		_, err := s.Enqueue(ctx, nil, engine.At(t0), jobs)
		require.NoError(t, err)
		d := newDispatcher(t, s, dispatcher.Config{Clock: clock.NewFake(t0.Add(time.Minute)), Logger: quiet(), BatchSize: dispatcher.MaxBatchSize})
		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, dispatcher.MaxBatchSize, res.Promoted)
		require.Equal(t, map[string]int{"ready": 1, "blocked": dispatcher.MaxBatchSize - 1}, testdb.JobStates(t, s))
	})
}
