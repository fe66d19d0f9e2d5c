package otelsluice_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
)

type mail struct{ N int }

func (mail) Kind() string { return "mail" }

// observability.md, "Around each enqueue": without the caller's
// transaction "the whole chain is one transaction: next begins it and
// writes the jobs, and it commits only when the outermost middleware
// returns nil". otelsluice's enqueue middleware is the outermost
// (InstrumentClient), and next returning nil does not tell it the commit
// succeeded: its span ends with the enqueue's outcome (jobs.OnEnqueueDone).
// When the commit fails, the enqueue returns an error and the database
// holds no job, and the span says the enqueue failed and names no job.
func TestAnEnqueueWhoseCommitFailsHasNoSuccessfulSpan(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		o, err := otelsluice.New(otelsluice.Config{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider()})
		require.NoError(t, err)
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[mail]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), reg, o.InstrumentClient(jobs.ClientConfig{Clock: c}))

		// How many statements (the commit last) one enqueue takes.
		for i := range 2 {
			_, err := client.Enqueue(ctx, mail{N: i})
			require.NoError(t, err)
		}
		before := faults.Count()
		_, err = client.Enqueue(ctx, mail{N: 2})
		require.NoError(t, err)
		per := faults.Count() - before

		faults.FailAt(per) // the next enqueue's commit
		_, err = client.Enqueue(ctx, mail{N: 3})
		require.Error(t, err, "the commit failed")
		require.False(t, faults.Pending(), "the fault fired")
		var n int64
		rows, qerr := base.DB().Query(ctx, `SELECT COUNT(*) FROM sluice_jobs`)
		require.NoError(t, qerr)
		require.True(t, rows.Next())
		require.NoError(t, rows.Scan(&n))
		rows.Close()
		require.EqualValues(t, 3, n, "the failed enqueue wrote nothing")

		spans := sr.Ended()
		require.Len(t, spans, 4)
		last := spans[3]
		t.Logf("the failed enqueue's span: status %v %q, attributes %v", last.Status().Code, last.Status().Description, attrs(last))
		require.Equal(t, codes.Error, last.Status().Code, "the span of an enqueue that failed says so")
		_, named := attrs(last)["messaging.message.id"]
		require.False(t, named, "and names no job: none was written")
		ok := spans[2]
		require.Equal(t, codes.Unset, ok.Status().Code, "a committed enqueue's span")
		_, named = attrs(ok)["messaging.message.id"]
		require.True(t, named, "names its job")
	})
}
