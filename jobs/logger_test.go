package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

type loggedArgs struct{ N int }

func (loggedArgs) Kind() string { return "logged" }

// observability.md, "Logging": "Each run has a *slog.Logger with the
// job's job_id, kind, queue and attempt". A logger put in the context
// given to Run or Drain with jobs.WithLogger (say by an app that also
// calls jobs.Logger outside runs, or a run that drains another worker)
// leaked into every run: jobs.Logger returned it as it was, without the
// job's attributes.
func TestARunsLoggerHasTheJobWhateverTheWorkersContext(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewJSONHandler(&syncWriter{mu: &mu, w: &buf}, nil))
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[loggedArgs]) error {
			jobs.Logger(ctx).Info("working")
			return nil
		}))
		id := h.enqueue(loggedArgs{N: 1})
		ctx := jobs.WithLogger(context.Background(), log.With("app", "x"))
		_, err := h.worker(jobs.WorkerConfig{Logger: log}).Drain(ctx)
		require.NoError(t, err)
		var line map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if strings.Contains(l, `"working"`) {
				require.NoError(t, json.Unmarshal([]byte(l), &line))
			}
		}
		require.NotNil(t, line, buf.String())
		require.Equal(t, float64(id), line["job_id"], "the run's logger carries the job: %v", line)
		require.Equal(t, "logged", line["kind"])
	})
}
