package jobs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// observability.md, "Middleware" (on Hooks): hooks joined with Hooks.Join
// are each called even when another panics, and every panic is logged
// with its stack. A joined hook once stopped at the first side's panic,
// so the other side (otelsluice's metrics) never saw the event.
func TestJoinedHooksEachRunAndEveryPanicIsLogged(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var ran []string
	side := func(name string, panics bool) Hooks {
		return Hooks{OnFinish: func(FinishEvent) {
			ran = append(ran, name)
			if panics {
				panic(name + " broke")
			}
		}}
	}
	h := side("a", true).Join(side("b", false)).Join(side("c", true)).guarded(log)
	h.OnFinish(FinishEvent{})
	require.Equal(t, []string{"a", "b", "c"}, ran)
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "a worker hook panicked"), out)
	require.Contains(t, out, "panic: a broke")
	require.Contains(t, out, "panic: c broke")
	require.NotContains(t, out, "panic: panic:", "each panic is wrapped once")
	require.Contains(t, out, "events_internal_test.go", "with the stack of where it panicked")
}
