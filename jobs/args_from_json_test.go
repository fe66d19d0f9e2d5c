package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// A config file's args are decoded strictly (Registry.ArgsFromJSON: a
// field the kind does not have is a typo); a job's stored args are not:
// a newer version of the app may have enqueued them with a field this
// worker's args type does not have yet, and the job runs with the fields
// it knows.
func TestStoredArgsMayCarryFieldsTheKindDoesNotHave(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		got := make(chan int, 1)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[noop]) error {
			got <- j.Args.N
			return nil
		}))
		_, err := h.reg.ArgsFromJSON("noop", []byte(`{"N": 7, "Extra": true}`))
		require.ErrorContains(t, err, `decode args of noop: json: unknown field "Extra"`)
		args, err := h.reg.ArgsFromJSON("noop", []byte(`{"N": 7}`))
		require.NoError(t, err)
		require.Equal(t, noop{N: 7}, args)

		_, err = h.store.Enqueue(context.Background(), nil, engine.At(t0),
			[]engine.NewJob{{Kind: "noop", Queue: "default", Args: []byte(`{"N": 7, "Extra": true}`), MaxAttempts: 3}})
		require.NoError(t, err)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, 7, <-got)
	})
}
