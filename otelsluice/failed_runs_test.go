package otelsluice_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

type panickingArgs struct{ N int }

func (panickingArgs) Kind() string { return "panicking" }

// The producer's view of a kind: N is a string.
type looseArgs struct{ N string }

func (looseArgs) Kind() string { return "strict" }

// The worker's view of the same kind: N is an int, so {"N":"x"} does not
// decode.
type strictArgs struct{ N int }

func (strictArgs) Kind() string { return "strict" }

func runSpans(e *env, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// observability.md, "Spans": "A failed attempt sets the span's status to
// Error with the error, and records it as an exception event", and
// error.type is set "on a failed attempt". A panicking handler fails its
// attempt (the worker records "panic: boom" and the stack as the job's
// error), but its span had only the status: no exception event and no
// error.type.
func TestAPanickingRunIsRecordedAsAFailedAttempt(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[panickingArgs]) error {
			panic("boom")
		}, jobs.MaxAttempts(1)))
		_, err := e.client.Enqueue(context.Background(), panickingArgs{N: 1})
		require.NoError(t, err)
		e.drain(jobs.WorkerConfig{})
		s := e.span("process default")
		require.Equal(t, "panicked", attrs(s)["sluice.outcome"].AsString())
		require.Equal(t, codes.Error, s.Status().Code)
		require.True(t, strings.HasPrefix(s.Status().Description, "panic: boom"), s.Status().Description)
		require.Contains(t, events(s), "exception", "a panicked attempt records its error as an exception event")
		require.NotEmpty(t, attrs(s)["error.type"].AsString(), "a panicked attempt has error.type")
	})
}

// observability.md, "Spans": "Run: a consumer span, `process <queue>`, for
// each attempt", and middleware runs "around every enqueue and every run".
// An attempt whose args do not decode is claimed, spends an attempt and
// fails (FinishEvent says so), but the worker failed it before the
// middleware chain: no middleware, and so no span, saw it.
func TestAnAttemptWhoseArgsDoNotDecodeHasARunSpan(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[looseArgs]) error { return nil }))
		_, err := e.client.Enqueue(context.Background(), looseArgs{N: "not a number"})
		require.NoError(t, err)

		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(context.Context, *jobs.Job[strictArgs]) error { return nil }))
		var finished []jobs.FinishEvent
		cfg := e.o.InstrumentWorker(jobs.WorkerConfig{Clock: e.clock, Logger: quietLogger(),
			Hooks: jobs.Hooks{OnFinish: func(ev jobs.FinishEvent) { finished = append(finished, ev) }}})
		w, err := jobs.NewWorker(e.store, reg2, cfg)
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.NoError(t, err)

		require.Len(t, finished, 1)
		require.Equal(t, jobs.OutcomeRetried, finished[0].Outcome, "the attempt ran and failed: %v", finished[0].Err)
		require.Len(t, runSpans(e, "process default"), 1, "the failed attempt has a run span")
	})
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type countedArgs struct{ N int }

func (countedArgs) Kind() string { return "counted" }

// observability.md: InstrumentWorker "joins the metric hooks to yours", and
// "A worker hook that panics is logged … and the worker carries on". When
// the app's own OnFinish panicked, the joined hook stopped there and the
// integration's OnFinish, which counts sluice.jobs.finished and records
// sluice.job.duration, never ran: every run went uncounted.
func TestAPanickingAppHookDoesNotLoseTheIntegrationsMetrics(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[countedArgs]) error { return nil }))
		for i := range 3 {
			_, err := e.client.Enqueue(context.Background(), countedArgs{N: i})
			require.NoError(t, err)
		}
		e.drain(jobs.WorkerConfig{Hooks: jobs.Hooks{OnFinish: func(jobs.FinishEvent) { panic("app hook bug") }}})
		require.Len(t, runSpans(e, "process default"), 3, "the runs happened")
		var n int64
		for _, dp := range sum(t, collect(t, e), "sluice.jobs.finished").DataPoints {
			n += dp.Value
		}
		require.EqualValues(t, 3, n, "sluice.jobs.finished counts the three runs")
	})
}
