package cli_test

import (
	"context"
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
// (019, 020), and `migrate down 010` reads its count in decimal; but
// `--to` and `--steps` are parsed by the flag package, which takes a
// leading 0 for octal: `migrate up --to 017` stopped after 015, `migrate
// down --steps 010` reverted 8 migrations, and `--to 019` was "invalid
// value". A version or count with leading zeros must mean what it says
// (or be refused), never another number.
func TestReviewMigrateVersionsWithLeadingZerosAreDecimal(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := "--database-url=" + url
			code, out, stderr := run(t, "migrate", "up", "--to", "017", db)
			newest, _ := appliedVersions(t, url)
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, 17, newest, "migrate up --to 017 applied up to %03d:\n%s", newest, out)

			code, _, stderr = run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			_, all := appliedVersions(t, url)
			code, out, stderr = run(t, "migrate", "down", "--steps", "010", db)
			require.Equal(t, 0, code, stderr)
			_, left := appliedVersions(t, url)
			require.Equal(t, all-10, left, "migrate down --steps 010 reverted %d:\n%s", all-left, out)
		})
	}
}
