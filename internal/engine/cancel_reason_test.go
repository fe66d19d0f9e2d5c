package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// An operator's reason for a cancel is kept as the job's last error: one no
// database could store (a NUL, invalid UTF-8, too long) is refused with a
// clear error and the job is left as it was; the longest allowed is kept
// whole.
func TestACancelReasonTheDatabaseCannotStoreIsRefused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1}})
		require.NoError(t, err)
		id := res[0].ID
		for reason, want := range map[string]string{
			"stop\x00now": "NUL",
			"stop\xffnow": "not valid UTF-8",
			strings.Repeat("x", engine.MaxReasonBytes+1): "at most 16384",
		} {
			_, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, reason)
			require.ErrorContains(t, err, want)
			j, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, engine.StateReady, j.State, "left as it was")
		}
		long := strings.Repeat("é", engine.MaxReasonBytes/2)
		done, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, long)
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: id, State: engine.StateCancelled}}, done)
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, j.State)
		require.Equal(t, long, j.LastError, "kept whole")
	})
}
