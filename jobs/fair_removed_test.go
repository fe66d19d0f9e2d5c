package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/fairness.md, Rules: a deploy that removes Fair from a kind (its
// only fair kind) leaves the jobs enqueued before it with their fairness
// keys; its workers still take them, as a removed limit's jobs are taken
// (docs/rate-limits.md, "Changing a limit"), rather than leave them ready
// for good.
func TestRemovingFairLetsTheKindsFairJobsRun(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[tenantJob]) error { return nil },
			jobs.Fair(func(a tenantJob) any { return a.Tenant })))
		var ids []int64
		for _, tenant := range []string{"a", "a", "a", "b", "b"} {
			ids = append(ids, h.enqueue(tenantJob{Tenant: tenant}))
		}

		// The new deploy: the same kind, no fairness key.
		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(context.Context, *jobs.Job[tenantJob]) error { return nil }))
		h.reg = reg2
		h.drain(jobs.WorkerConfig{})
		for _, id := range ids {
			require.Equal(t, engine.StateCompleted, h.job(id).State, "job %d, enqueued fair before the deploy that removed Fair", id)
		}
	})
}
