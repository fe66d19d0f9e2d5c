package otelsluice

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"pgregory.net/rapid"
)

// parseTraceparent reads what the W3C propagator reads, or leaves the
// value to it: for valid traceparents and for ones a byte away from valid
// (another version, an upper-case digit, a zero id, a flag, a dash
// moved), it never disagrees with propagation.TraceContext.
func TestParseTraceparentAgreesWithThePropagator(t *testing.T) {
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	alphabet := []byte("0123456789abcdefABCDEF-xz ")
	rapid.Check(t, func(t *rapid.T) {
		b := []byte(valid)
		for range rapid.IntRange(0, 3).Draw(t, "edits") {
			i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			b[i] = rapid.SampledFrom(alphabet).Draw(t, "byte")
		}
		if rapid.Bool().Draw(t, "zero trace id") {
			copy(b[3:35], "00000000000000000000000000000000")
		}
		h := string(b)
		if rapid.Bool().Draw(t, "longer") {
			h += "-" + rapid.StringOfN(rapid.SampledFrom([]rune("0123456789abcdef-")), 0, 8, -1).Draw(t, "more")
		}
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": h}))
		got, ok := parseTraceparent(h)
		if !ok {
			require.False(t, got.IsValid())
			return
		}
		require.True(t, want.Equal(got), "%q: the propagator read %v, the parser %v", h, want, got)
	})
	got, ok := parseTraceparent(valid)
	require.True(t, ok)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", got.SpanID().String())
	require.True(t, got.IsSampled())
	require.True(t, got.IsRemote())
}
