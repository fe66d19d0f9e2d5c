package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type smsQueueJob struct{ N int }

func (smsQueueJob) Kind() string { return "sms_queue_job" }

// docs/rate-limits.md, Checks: "W004 an override names no declared limit:
// it changes nothing". An override on the bare scope "@queue" was reported
// so, yet every queue limit's budget ("@queue/NAME") falls back to its
// scope's override, so it changes every queue's limit (here, pausing it).
func TestAnOverrideOfEveryQueueLimitIsNotAStrayOverride(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[smsQueueJob]) error { return nil }, jobs.Queue("sms")))
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 100, Per: time.Minute, Burst: 10}))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: engine.QueueScope, To: 0, Per: time.Minute}, t0))
		h.enqueue(smsQueueJob{N: 1})
		res := h.drain(jobs.WorkerConfig{Queues: []string{"sms"}})
		changed := res.Completed == 0
		findings, err := jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		var stray []string
		for _, f := range findings {
			if f.Code == jobs.CodeStrayOverride {
				stray = append(stray, f.Message)
			}
		}
		if changed {
			require.Empty(t, stray, "the override paused queue sms (completed %d, deferred %d), but check says it changes nothing", res.Completed, res.Deferred)
		} else {
			require.NotEmpty(t, stray)
		}
	})
}

// A queue's name may not hold a comma: the queues of a list (a worker's
// --queues, and the queues a worker registers with, which sluice check
// reads back) are written with commas between them. A live worker of
// queue "sms,eu" was read as one of "sms" and "eu", and check warned
// (W003) that the limited queue had no worker.
func TestAQueueNameWithACommaIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		noop := func(context.Context, *jobs.Job[smsQueueJob]) error { return nil }
		require.ErrorContains(t, jobs.Register(jobs.NewRegistry(), noop, jobs.Queue("sms,eu")), "comma")
		require.ErrorContains(t, h.reg.LimitQueue("sms,eu", ratelimit.QueueLimit{To: 10, Per: time.Second}), "comma")
		_, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Queues: []string{"sms,eu"}})
		require.ErrorContains(t, err, "comma")
		require.ErrorContains(t, h.store.PauseQueue(ctx, "sms,eu", t0), "comma")
		_, err = h.store.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "sms_queue_job", Queue: "sms,eu", Args: []byte(`{}`), MaxAttempts: 1}})
		require.ErrorContains(t, err, "comma")
	})
}
