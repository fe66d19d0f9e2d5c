package jobstest_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/jobs/jobstest"
)

// jobstest.Enqueued: "read through tx when it is not nil (a pgx.Tx or
// *sql.Tx that may not have committed)". A typed nil transaction of the
// store's kind (a test whose Begin was never reached) is an error that
// says so, as Client.EnqueueTx's is ("the transaction is a nil *sql.Tx;
// pass the one your Begin returned"), not a panic or a message that the
// store takes a *sql.Tx, not a *sql.Tx.
func TestEnqueuedWithATypedNilTransactionSaysSo(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[welcome](reg))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		var tx any = (*sql.Tx)(nil)
		if s.Dialect().Name() == "postgres" {
			tx = (*pgxpool.Tx)(nil)
		}
		_, wantErr := c.EnqueueTx(context.Background(), tx, welcome{})
		require.ErrorContains(t, wantErr, "the transaction is a nil")

		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
					t.Errorf("jobstest.Enqueued panicked on a nil %T: %v", tx, r)
				}
			}()
			_, err = jobstest.Enqueued[welcome](context.Background(), c, tx)
		}()
		require.ErrorContains(t, err, "nil")
		require.NotContains(t, err.Error(), "not a *sql.Tx")
	})
}
