package jobs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/jobs"
)

// Explanation.Lines prints "estimated start: WHEN (IN), from BASIS": every
// EstimateBasis given with a start must read after "from". A running job's
// read "from it has started", and the next ready job's "from it is next:
// …".
func TestExplainsEstimatedStartReadsAsASentence(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var running []string
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			e, err := h.client.Explain(ctx, j.ID)
			if err == nil {
				running = e.Lines()
			}
			return err
		}))
		id := h.enqueue(noop{1})
		next := h.explain(id).Lines()
		require.Equal(t, "estimated start: "+human.Stamp(t0)+" (now), from no job of its queue ahead of it: it starts as soon as a worker of the queue is free",
			next[len(next)-1])

		h.drain(jobs.WorkerConfig{})
		require.NotEmpty(t, running)
		last := running[len(running)-1]
		require.True(t, strings.HasPrefix(last, "estimated start: "), last)
		require.True(t, strings.HasSuffix(last, ", from the start of its current attempt"), last)

		// A job that does not exist: an error a caller can name, which
		// says what is missing once (the CLI prefixes "explain: ").
		_, err := h.client.Explain(context.Background(), 1<<40)
		require.ErrorIs(t, err, jobs.ErrNotFound)
		require.EqualError(t, err, "job 1099511627776: not found")
	})
}
