package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSharedPreparedStatements is the error Open and OpenPool return when
// the pool's query exec mode keeps a prepared statement from one round
// trip to the next and its connections go through a pooler that lends
// each transaction whichever server connection is free: PgBouncer in
// transaction mode (before 1.21, or without max_prepared_statements).
// pgx's default mode, cache_statement, prepares named statements, which
// fail on a server connection another client prepared them on ("prepared
// statement … already exists") or on one they were never prepared on
// ("… does not exist"); describe_exec describes the unnamed statement in
// one round trip and runs it in the next, which may reach another server
// connection ("unnamed prepared statement does not exist").
var ErrSharedPreparedStatements = errors.New("the connection goes through a pooler in transaction mode (PgBouncer's pool_mode = transaction?), " +
	"whose server connections do not keep a client's prepared statements, and the pool's query exec mode needs them: " +
	"add default_query_exec_mode=cache_describe to the URL (docs/operations.md, \"PostgreSQL behind PgBouncer\"), " +
	"or set PgBouncer's max_prepared_statements (1.21 and later)")

// checkPooler returns ErrSharedPreparedStatements if the pool's query
// exec mode keeps prepared statements across round trips (cache_statement,
// pgx's default, or describe_exec) and a statement one client prepares is
// there for another to collide with: the two shared a server connection.
// It looks only for those modes, and when its connection's process id
// (the one sent at connect) is not the server's: a pooler's, so a direct
// connection costs one query. Two clients of a pooler in transaction
// mode that is otherwise idle use the same server connection one after
// the other; a busy one may lend the second another, and then it passes.
// It is a check, not a step of opening: what keeps it from telling (a
// second connection refused) lets Open go on.
func checkPooler(ctx context.Context, pool *pgxpool.Pool) error {
	if m := pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement && m != pgx.QueryExecModeDescribeExec {
		return nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil // the pool's own statements will say what is wrong
	}
	defer c.Release()
	if pooled, err := pooled(ctx, c.Conn()); err != nil || !pooled {
		return nil // no pooler between, or no telling
	}
	// The second client connects as the listener would: through the
	// pool's hooks, which may supply a password that rotates.
	other, closeOther, err := (&DB{pool: pool}).listenConn(ctx)
	if err != nil {
		return nil
	}
	defer closeOther()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "sluice_probe_" + hex.EncodeToString(b)
	if _, err := c.Conn().PgConn().Prepare(ctx, name, "SELECT 1", nil); err != nil {
		return nil
	}
	defer func() { _ = c.Conn().PgConn().Exec(context.WithoutCancel(ctx), "DEALLOCATE "+name).Close() }()
	_, err = other.PgConn().Prepare(ctx, name, "SELECT 1", nil)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P05" { // duplicate_prepared_statement
		return ErrSharedPreparedStatements
	}
	if err == nil {
		_ = other.PgConn().Exec(ctx, "DEALLOCATE "+name).Close()
	}
	return nil
}

// pooled reports whether conn goes through a pooler: the backend that
// answers is not the one whose process id came back at connect (a
// pooler sends its own). A direct connection is never pooled.
func pooled(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, err
	}
	return pid != conn.PgConn().PID(), nil
}
