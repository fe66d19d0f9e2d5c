package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type elsewhereArgs struct{}

func (elsewhereArgs) Kind() string { return "elsewhere_kind" }

// A worker with no Queues claims every queue its registry's kinds go to,
// and "default": a kind registered with jobs.Queue("stripe") is worked
// without naming its queue, as `myapp worker` and jobstest.Drain work it.
// It used to claim "default" alone, silently, so that a registry whose
// every kind went to another queue got a worker that ran nothing.
func TestAWorkerWithNoQueuesClaimsTheRegistrysQueuesAndDefault(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := map[string]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[email]) error {
			ran[j.Queue]++
			return nil
		}, jobs.Queue("stripe")))
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			ran[j.Queue]++
			return nil
		}, jobs.Queue("reports")))
		require.NoError(t, jobs.Declare[elsewhereArgs](h.reg, jobs.Queue("elsewhere"))) // another program runs it
		h.enqueue(email{To: "a"})
		h.enqueue(noop{N: 1})
		h.enqueue(email{To: "b"}, jobs.Queue(jobs.DefaultQueue)) // sent to default at enqueue
		other := h.enqueue(elsewhereArgs{})

		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 3, res.Completed)
		require.Equal(t, map[string]int{"stripe": 1, "reports": 1, jobs.DefaultQueue: 1}, ran)
		require.Equal(t, engine.StateReady, h.job(other).State, "a queue only a declared kind goes to is left to its workers")

		// Named queues are claimed as named, and no others.
		h.enqueue(email{To: "c"})
		require.Zero(t, h.drain(jobs.WorkerConfig{Queues: []string{"reports"}}).Completed)
	})
}
