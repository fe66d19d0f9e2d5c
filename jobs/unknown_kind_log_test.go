package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "A job whose kind this worker has no
// handler for ... is given back ... The worker logs each such kind once."
// The give-back is tested (rolling_deploy_test.go); this holds the log
// line: once per kind and worker.
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
		require.Equal(t, 4, res.Snoozed, "every job of a kind with no handler is given back, none lost")
		const msg = "no handler for a claimed job's kind"
		require.Equal(t, 2, logs.count(msg), "one line per unknown kind: %q", logs.lines)
		const rest = "; it is given back, without spending an attempt, until a worker that has one claims it\""
		require.Contains(t, logs.find(t, msg+rest+" kind=email"), "job_id=")
		require.Contains(t, logs.find(t, msg+rest+" kind=noop"), "job_id=")

		// Given back again once due, they log nothing more.
		h.clock.Advance(jobs.MaxGiveBackWait)
		res, err = w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Snoozed)
		require.Equal(t, 2, logs.count(msg), "still once per kind")
	})
}
