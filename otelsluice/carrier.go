package otelsluice

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// readCarrier is a propagation.TextMapCarrier over a running job's
// metadata; it never writes.
type readCarrier map[string]string

func (c readCarrier) Get(key string) string { return c[key] }
func (c readCarrier) Set(string, string)    {}
func (c readCarrier) Keys() []string        { return keysOf(c) }

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// producer returns the enqueue's span context that md carries, or an
// invalid one, and the baggage it carries, if any. With the default
// propagator (W3C trace context, which carries no baggage) a plain
// version-00 traceparent without tracestate, which is what every enqueue
// of this package writes, is read directly; anything else goes through
// the propagator.
func (o *Integration) producer(md map[string]string) (trace.SpanContext, baggage.Baggage) {
	if len(md) == 0 {
		return trace.SpanContext{}, baggage.Baggage{}
	}
	if o.defaultProp {
		tp, ok := md[traceparentKey]
		if !ok {
			return trace.SpanContext{}, baggage.Baggage{}
		}
		if _, ok := md[tracestateKey]; !ok {
			if sc, ok := parseTraceparent(tp); ok {
				return sc, baggage.Baggage{}
			}
		}
	}
	ctx := o.prop.Extract(context.Background(), readCarrier(md))
	return trace.SpanContextFromContext(ctx), baggage.FromContext(ctx)
}

// The W3C trace context's metadata keys.
const (
	traceparentKey = "traceparent"
	tracestateKey  = "tracestate"
)

// parseTraceparent reads a version-00 traceparent,
// 00-<trace id>-<span id>-<flags> in lowercase hex, as
// propagation.TraceContext does; ok is false for anything else (another
// version, a malformed value, a zero id), which the propagator then
// judges.
func parseTraceparent(h string) (sc trace.SpanContext, ok bool) {
	if len(h) != 55 || h[0] != '0' || h[1] != '0' || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return trace.SpanContext{}, false
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(cfg.TraceID[:], h[3:35]) || !lowerHex(cfg.SpanID[:], h[36:52]) || !lowerHex(flags[:], h[53:55]) || flags[0] > 3 {
		return trace.SpanContext{}, false
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	cfg.Remote = true
	sc = trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

// lowerHex decodes src, lowercase hex of 2*len(dst) digits, into dst.
func lowerHex(dst []byte, src string) bool {
	for i := range dst {
		hi, lo := hexDigit(src[2*i]), hexDigit(src[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexDigit(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}
