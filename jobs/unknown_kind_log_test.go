package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "A job whose kind this worker does not
// know ... fails the attempt with a clear error and is retried with
// backoff ... The worker logs an unknown kind once." The retry is tested
// (TestUnknownKindAndUndecodableArgsAreRetriedNotLost); this holds the
// log line: once per kind and worker.
func TestAWorkerLogsAnUnknownKindOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg)) // enqueued here, run elsewhere
		require.NoError(t, jobs.Declare[noop](h.reg))
		for range 3 {
			h.enqueue(email{To: "x"})
		}
		h.enqueue(noop{N: 1})
		logs := &logLines{}
		w := h.worker(jobs.WorkerConfig{Logger: logs.logger()})
		res, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Retried, "every job of a kind with no handler is retried, none lost")
		const msg = "no handler for a claimed job's kind"
		require.Equal(t, 2, logs.count(msg), "one line per unknown kind: %q", logs.lines)
		require.Contains(t, logs.find(t, msg+"; it is retried with backoff until a worker that has one claims it\" kind=email"), "job_id=")
		require.Contains(t, logs.find(t, msg+"; it is retried with backoff until a worker that has one claims it\" kind=noop"), "job_id=")

		// The retries, once due, log nothing more.
		h.clock.Advance(jobs.MaxBackoff)
		res, err = w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Retried)
		require.Equal(t, 2, logs.count(msg), "still once per kind")
	})
}
