package engine_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A MySQL URL with autocommit=0 (or a server whose init_connect sets it)
// no longer loses jobs: sluice's own pool turns autocommit on, so a plain
// enqueue, one statement outside a transaction, commits as it ends and
// another pool sees the job; before, it stayed in a transaction no one
// committed. An app's pool whose sessions run with autocommit off is
// refused by OpenDB, naming the setting.
func TestMySQLWithAutocommitOffLosesNoEnqueue(t *testing.T) {
	b, ok := testdb.Named(t, "mysql")
	if !ok {
		t.Skip("no MySQL: set SLUICE_TEST_MYSQL_URL")
	}
	u := b.URL(t)
	s := testdb.Opener(t, u+"?autocommit=0")()
	_, err := s.MigrateUp(t.Context(), 0)
	require.NoError(t, err)
	id := enqueue(t, s, t0, job("k", "default", 0))[0]
	other := testdb.Opener(t, u)()
	info, err := other.GetJob(t.Context(), id)
	require.NoError(t, err, "another pool sees the job: it committed")
	require.Equal(t, engine.StateReady, info.State)

	cfg, err := mysql.Config(u + "?autocommit=0")
	require.NoError(t, err)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer db.Close()
	_, err = mysql.OpenDB(t.Context(), db)
	require.ErrorContains(t, err, "autocommit")
}
