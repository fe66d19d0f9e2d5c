package jobs_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// operations.md: "Until every migration this version of sluice knows is
// applied, enqueue returns store.ErrPendingMigrations". On a database
// without sluice's schema at all, EnqueueTx finds that out in the caller's
// transaction, under a savepoint, so that on PostgreSQL the failed read of
// the missing table does not abort it: the app's own writes go on and
// commit, as after any refused enqueue.
func TestEnqueueTxOnAnUnmigratedDatabaseLeavesTheCallersTransactionUsable(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.OpenRaw(t)
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Declare[email](reg))
			c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
			exec := func(ex func(string) error, q string) { require.NoError(t, ex(q), q) }
			_, err := s.DB().Exec(ctx, "CREATE TABLE app_users (id INT PRIMARY KEY)")
			require.NoError(t, err)

			tx, commit, rollback := callerTx(t, s)
			var txExec func(string) error
			switch tx := tx.(type) {
			case pgx.Tx:
				txExec = func(q string) error { _, err := tx.Exec(ctx, q); return err }
			case *sql.Tx:
				txExec = func(q string) error { _, err := tx.ExecContext(ctx, q); return err }
			}
			exec(txExec, "INSERT INTO app_users (id) VALUES (1)")
			_, err = c.EnqueueTx(ctx, tx, email{To: "x"})
			require.ErrorIs(t, err, store.ErrPendingMigrations)
			if err := txExec("INSERT INTO app_users (id) VALUES (2)"); err != nil {
				rollback()
				t.Fatalf("the caller's transaction is unusable after a refused EnqueueTx: %v", err)
			}
			commit()
			var n int
			rows, err := s.DB().Query(ctx, "SELECT COUNT(*) FROM app_users")
			require.NoError(t, err)
			require.True(t, rows.Next())
			require.NoError(t, rows.Scan(&n))
			rows.Close()
			require.Equal(t, 2, n, "the app's own writes committed")
		})
	}
}
