package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "A handler's error is kept as text every
// database takes: at most 16 KiB, cut on a character boundary and then
// marked `… (truncated)`". A handler's error that quotes give-back
// records (another job's last error, say: the case guarantees.md names)
// was cut to 16 KiB by the worker, and then the store quoted each mark in
// it, "; (quoted) given back …", nine bytes more per mark: the error kept
// was longer than 16 KiB plus the mark, on every database, in the job's
// last error and in its kept attempts. The store quotes, then cuts.
func TestAnErrorQuotingGiveBacksIsKeptWithin16KiB(t *testing.T) {
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
		require.True(t, strings.HasSuffix(j.LastError, truncated), "cut and marked")
		require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated),
			"the last error kept is %d bytes: more than 16 KiB and the truncation mark", len(j.LastError))
		kept, err := h.store.Attempts(context.Background(), id)
		require.NoError(t, err)
		require.Len(t, kept, 1)
		require.Equal(t, j.LastError, kept[0].Error, "the attempt kept has the same text")
	})
}

// A give-back's error that a worker's middleware wraps in give-back marks
// of its own (a middleware that adds the last upstream error, say) until
// the text before the give-back's record nearly fills 16 KiB: quoted, the
// marks push the record past 16 KiB, and a cut after the quoting would
// take the record with it, so that the next give-back would start a new
// streak and the job would be given back for ever. The text before the
// record is cut instead: the record is kept whole, within the bound, and
// the next give-back reads it.
func TestAGiveBacksRecordIsKeptWholeWhenItsErrorIsCut(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		prefix := strings.Repeat(engine.GivenBackMark, (16<<10-300)/len(engine.GivenBackMark))
		mw := func(ctx context.Context, _ jobs.JobInfo, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return fmt.Errorf("%s: %w", prefix, err)
			}
			return nil
		}
		cfg := jobs.WorkerConfig{GiveBackFor: time.Hour, Middleware: []jobs.Middleware{mw}}
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return nil }))
		id := h.enqueue(email{To: "a"})
		first := h.clock.Now()
		for n := 1; n <= 2; n++ {
			require.Equal(t, jobs.DrainResult{Snoozed: 1}, drainRes(t, h, jobs.NewRegistry(), cfg))
			j := h.job(id)
			require.Equal(t, engine.StateScheduled, j.State)
			require.Contains(t, j.LastError, streakText(n, first), "give-back %d reads the streak", n)
			require.Equal(t, 1, strings.Count(j.LastError, engine.GivenBackMark), "the record, and no other mark")
			require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated), "the last error kept is %d bytes", len(j.LastError))
			h.clock.Set(j.RunAt)
		}
	})
}
