package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every number flag reads decimal, whatever its leading zeros: the flag
// package's Int would read --to 010 as 8 and --burst 0x2 as 2, so a limit
// typed with a leading zero was stored smaller than typed.
func TestNumberFlagsAreDecimal(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		code, out, stderr := run(t, "limits", "set", "Stripe/Account/7", "--to", "010", "--per", "1s", "--burst", "03", db)
		require.Equal(t, 0, code, "%s%s", out, stderr)
		code, out, stderr = run(t, "limits", "--json", db)
		require.Equal(t, 0, code, stderr)
		var got []struct {
			Target string `json:"target"`
			To     int    `json:"to"`
			Burst  int    `json:"burst"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got, 1)
		require.Equal(t, 10, got[0].To, out)
		require.Equal(t, 3, got[0].Burst, out)

		code, _, stderr = run(t, "limits", "set", "Stripe/Account/7", "--to", "0x10", "--per", "1s", db)
		require.Equal(t, 2, code)
		require.Contains(t, stderr, `invalid value "0x10" for flag -to: "0x10" is not a whole number`)
		code, _, stderr = run(t, "jobs", "--limit", "08", db)
		require.Equal(t, 0, code, "08 is eight, not a bad octal number: %s", stderr)
		require.False(t, strings.Contains(stderr, "invalid"), stderr)
	})
}
