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

// guarantees.md: a job's last error is kept "at most 16 KiB, cut on a
// character boundary and then marked `… (truncated)`", and an operator's
// cancel reason that quotes a give-back's record is kept with it quoted.
// A reason of 16 KiB (the longest allowed) made of give-back marks was
// checked before the store quoted each mark, nine bytes more each: it
// was kept as about 20 KiB. It is kept quoted, then cut.
func TestACancelReasonQuotingGiveBacksIsKeptWithin16KiB(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		reason := strings.Repeat(engine.GivenBackMark, engine.MaxReasonBytes/len(engine.GivenBackMark))
		_, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, reason)
		require.NoError(t, err)
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, j.State)
		require.NotContains(t, j.LastError, engine.GivenBackMark, "no give-back's record")
		require.True(t, strings.HasPrefix(j.LastError, "; (quoted) given back without spending an attempt ("), "quoted, readably")
		require.True(t, strings.HasSuffix(j.LastError, engine.TruncatedMark), "cut and marked")
		require.LessOrEqual(t, len(j.LastError), 16<<10+len("… (truncated)"), "the reason kept is %d bytes", len(j.LastError))
	})
}
