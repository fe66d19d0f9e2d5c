package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "A handler's error is kept as text every
// database takes: at most 16 KiB, cut on a character boundary and then
// marked `… (truncated)`". A handler's error that quotes give-back
// records (another job's last error, say: the case guarantees.md names)
// is cut to 16 KiB by the worker, and then the store quotes each mark in
// it, "; (quoted) given back …", nine bytes more per mark: the error kept
// is longer than 16 KiB plus the mark, on every database, in the job's
// last error and in its kept attempts.
func TestReviewAnErrorQuotingGiveBacksIsKeptWithin16KiB(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		text := strings.Repeat(engine.GivenBackMark, (32<<10)/len(engine.GivenBackMark))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[upstream]) error {
			return errors.New(text)
		}, jobs.MaxAttempts(1)))
		id := h.enqueue(upstream{})
		out := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, out.Failed)

		j := h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "(quoted)", "the marks are quoted, as the give-back streak's promise says")
		require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated),
			"the last error kept is %d bytes: more than 16 KiB and the truncation mark", len(j.LastError))
	})
}
