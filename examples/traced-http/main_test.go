package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/store"
)

// Each request's trace holds its server span, the enqueue as its child,
// and the job's run as the enqueue's child; the second job waited for its
// slot, and its span says so.
func TestOneTraceJoinsTheRequestAndTheJob(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		spans, err := run(ctx, s, 2, io.Discard)
		require.NoError(t, err)
		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, sp := range spans {
			byName[sp.Name()] = append(byName[sp.Name()], sp)
		}
		require.Len(t, byName["POST /signup"], 2)
		require.Len(t, byName["enqueue mail"], 2)
		require.Len(t, byName["process mail"], 2)
		deferred := 0
		for i, req := range byName["POST /signup"] {
			enq := byName["enqueue mail"][i]
			require.Equal(t, req.SpanContext().SpanID(), enq.Parent().SpanID())
			var run sdktrace.ReadOnlySpan
			for _, r := range byName["process mail"] {
				if r.Parent().SpanID() == enq.SpanContext().SpanID() {
					run = r
				}
			}
			require.NotNil(t, run, "the run of request %d's job is the enqueue's child", i)
			require.Equal(t, req.SpanContext().TraceID(), run.SpanContext().TraceID())
			for _, kv := range run.Attributes() {
				if kv.Key == otelsluice.DeferralsKey && kv.Value.AsInt64() > 0 {
					deferred++
				}
			}
		}
		require.Equal(t, 1, deferred, "the second sign-up's email waited for its slot")
		out := render(spans)
		require.Contains(t, out, "      process mail (consumer)")
		require.Contains(t, out, `sluice.deferral_reason="rate limit send_welcome/smtp"`)
	})
}
