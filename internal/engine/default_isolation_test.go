package engine_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// A PostgreSQL database, role or server whose sessions default to
// REPEATABLE READ or SERIALIZABLE (ALTER ROLE … SET
// default_transaction_isolation, or the URL's options=-c …) changes
// nothing of sluice's own work: its transactions, and the statements it
// runs outside one, ask for READ COMMITTED, so concurrent migrators each
// find what the one before made, and concurrent claimers over shared
// budgets (creating them, deferring, promoting, handing out slots) keep
// both bounds without a serialization failure. Before, migrators failed
// on "relation already exists" and claims on 40001.
func TestSluicesOwnWorkRunsAtReadCommittedWhateverTheSessionsDefaultOnPostgres(t *testing.T) {
	b, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Skip("no PostgreSQL: set SLUICE_TEST_POSTGRES_URL")
	}
	for _, level := range []string{"serializable", "repeatable read"} {
		t.Run(level, func(t *testing.T) {
			lb := b
			lb.URL = func(t testing.TB) string {
				// In options a space of a value is escaped with a backslash.
				return b.URL(t) + "&options=-c%20default_transaction_isolation%3D" + url.PathEscape(strings.ReplaceAll(level, " ", `\ `))
			}
			u := lb.URL(t)
			s := testdb.Opener(t, u)()
			var got string
			rows, err := s.DB().Query(context.Background(), "SHOW default_transaction_isolation")
			require.NoError(t, err)
			for rows.Next() {
				require.NoError(t, rows.Scan(&got))
			}
			rows.Close()
			require.Equal(t, level, got, "the sessions default to the level the URL sets")

			concurrentMigrators(t, u)
			overlappingClaimers(t, lb, 120, 0, 5, false, [2]int{4, 6})
		})
	}
}
