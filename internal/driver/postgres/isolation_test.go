package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// serializableDefault is a postgres:// URL parameter that makes every
// session default to SERIALIZABLE, as ALTER ROLE … SET
// default_transaction_isolation = 'serializable' does.
const serializableDefault = "&options=-c%20default_transaction_isolation%3Dserializable"

// A statement the store runs outside its transactions (DB.Exec: the
// budgets a claim creates, a heartbeat, an operator's change) runs at READ
// COMMITTED whatever the sessions' default: an insert of a row another
// transaction inserted and committed while the statement waited for it
// finds the row and does nothing, where at SERIALIZABLE it failed with
// "could not serialize access due to concurrent update" (40001). The
// store's transactions begin at READ COMMITTED too, and a read-only
// snapshot (BeginRead) stays at REPEATABLE READ.
func TestTheStoresStatementsRunAtReadCommittedWhateverTheSessionsDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := postgresBackend(t).URL(t) + serializableDefault
	s := testdb.Opener(t, u)()
	other := testdb.Opener(t, u)()
	db := s.DB()
	_, err := db.Exec(ctx, "CREATE TABLE iso_probe (id int PRIMARY KEY)")
	require.NoError(t, err)

	level := func(begin func(context.Context) (engine.Tx, error)) string {
		t.Helper()
		tx, err := begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		rows, err := tx.Query(ctx, "SHOW transaction_isolation")
		require.NoError(t, err)
		defer rows.Close()
		var got string
		for rows.Next() {
			require.NoError(t, rows.Scan(&got))
		}
		require.NoError(t, rows.Err())
		return got
	}
	require.Equal(t, "serializable", scalar(t, db, "SHOW default_transaction_isolation"), "the URL set the sessions' default")
	require.Equal(t, "read committed", level(db.Begin))
	require.Equal(t, "repeatable read", level(db.BeginRead))

	holder, err := other.DB().Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "INSERT INTO iso_probe VALUES (1)")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, "INSERT INTO iso_probe VALUES (1) ON CONFLICT (id) DO NOTHING")
		done <- err
	}()
	testdb.WaitForLockWaits(t, s, 1, "iso_probe", "ON CONFLICT")
	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-done, "the insert finds the committed row and does nothing")
	require.Equal(t, "1", scalar(t, db, "SELECT count(*)::text FROM iso_probe"))
}

// scalar runs q through db and returns its one text value.
func scalar(t *testing.T, db engine.DB, q string) string {
	t.Helper()
	rows, err := db.Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	var v string
	for rows.Next() {
		require.NoError(t, rows.Scan(&v))
	}
	require.NoError(t, rows.Err())
	return v
}
