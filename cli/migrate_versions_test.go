package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// appliedVersions is the newest migration applied at url, and how many are.
func appliedVersions(t *testing.T, url string) (newest, count int) {
	t.Helper()
	st, err := testdb.Opener(t, url)().MigrationStatus(context.Background())
	require.NoError(t, err)
	for _, m := range st {
		if m.Applied {
			newest, count = m.Version, count+1
		}
	}
	return newest, count
}

// `migrate status` prints versions as 017, operations.md names them so
// (019, 020), and `migrate down 010` reads its count in decimal; so do
// `--to` and `--steps`, which the flag package's Int would read as octal
// (`--to 017` stopping after 015, `--steps 010` reverting 8, `--to 019`
// refused). A `migrate up --to` below the newest applied says what is
// applied past it rather than only "up to date".
func TestMigrateVersionsWithLeadingZerosAreDecimal(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := "--database-url=" + url
			code, out, stderr := run(t, "migrate", "up", "--to", "017", db)
			newest, _ := appliedVersions(t, url)
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, 17, newest, "migrate up --to 017 applied up to %03d:\n%s", newest, out)
			code, out, stderr = run(t, "migrate", "up", "--to", "019", db)
			require.Equal(t, 0, code, stderr)
			require.Equal(t, "applied 018_waiting_fair\napplied 019_delayed\n", afterDB(t, out))

			code, _, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			latest, all := appliedVersions(t, url)
			var past []string
			for v := 18; v <= latest; v++ {
				past = append(past, fmt.Sprintf("%03d", v))
			}
			code, out, stderr = run(t, "migrate", "up", "--to", "017", db)
			require.Equal(t, 0, code, stderr)
			require.Equal(t, fmt.Sprintf("up to date to 017, and past it: %s are applied, which migrate up never reverts "+
				"(migrate down %d takes the database back to 017)\n", strings.Join(past, ", "), len(past)), afterDB(t, out))

			code, out, stderr = run(t, "migrate", "down", "--steps", "010", db)
			require.Equal(t, 0, code, stderr)
			_, left := appliedVersions(t, url)
			require.Equal(t, all-10, left, "migrate down --steps 010 reverted %d:\n%s", all-left, out)
		})
	}
}
