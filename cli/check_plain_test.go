package cli_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// rate-limits.md, "Checks": W004 is "an override names no declared limit:
// it changes nothing". The plain `sluice` binary knows no declarations
// (its registry is empty: "the sluice binary, which knows no
// declarations", operations.md), so its `check` reports every override
// as W004 — "the override of Stripe names no declared limit; it changes
// nothing" — about an override the app's workers apply to every claim,
// and `sluice check --strict` fails on it. An operator who believes it
// clears a limit that protects an upstream. Plain `sluice check` should
// not claim what it cannot know (skip W004, or say the declarations are
// not known here).
func TestPlainSluiceCheckDoesNotCallEveryOverrideStray(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			db := "--database-url=" + b.URL(t)
			plain := func(args ...string) (int, string, string) {
				var out, errOut bytes.Buffer
				app := &cli.App{Name: "sluice", Stdout: &out, Stderr: &errOut}
				code := app.Run(context.Background(), args)
				return code, out.String(), errOut.String()
			}
			code, _, stderr := plain("migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			code, _, stderr = plain("limits", "set", "Stripe", "--to", "5", "--per", "1m", db)
			require.Equal(t, 0, code, stderr)
			code, out, _ := plain("check", db)
			require.Equal(t, 0, code)
			require.NotContains(t, out, "changes nothing",
				"plain sluice check, which knows no declarations, says an override the app applies changes nothing:\n%s", out)
			code, out, _ = plain("check", "--strict", db)
			require.NotContains(t, out, "W004", "--strict fails on a W004 plain sluice cannot know (exit %d)", code)
		})
	}
}
