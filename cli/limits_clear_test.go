package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `limits clear` checks the target by the key rule, as `limits set` does:
// on MySQL, whose comparisons ignore trailing spaces, clearing
// "ping/free " cleared "ping/free"'s override, and on PostgreSQL a NUL or
// a byte that is not UTF-8 came back as the database's own error. It is
// bad usage (exit 2, as for limits set) naming the target, refused before
// the database is asked, and the override stays.
func TestLimitsClearChecksTheTarget(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		code, _, stderr := run(t, "limits", "set", "ping/free", "--to", "10", "--per", "1s", db)
		require.Equal(t, 0, code, stderr)
		for _, target := range []string{"ping/free ", "ping/free\x00", "\xff", strings.Repeat("p", 300)} {
			code, _, stderr := run(t, "limits", "clear", target, db)
			require.Equal(t, 2, code, "%.20q", target)
			require.Contains(t, stderr, "limits: target ", "%.20q", target)
			require.NotContains(t, stderr, "SQLSTATE", "%.20q", target)
			code, out, _ := run(t, "limits", db)
			require.Equal(t, 0, code)
			require.Contains(t, out, "ping/free", "%.20q cleared the override", target)
		}
	})
}
