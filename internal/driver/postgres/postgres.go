// Package postgres is sluice's PostgreSQL store, over pgx/v5's native pool.
//
// Claims lock candidates with FOR UPDATE SKIP LOCKED, lists travel as
// arrays (one statement text per operation, so pgx prepares each once),
// and enqueues and promotions wake listening workers with NOTIFY.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/internal/engine"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Channel is the NOTIFY channel that carries the names of queues that
// gained ready jobs ("*" for any).
const Channel = engine.Channel

// Open connects to the database at url (postgres://…; pgx's parameters,
// such as pool_max_conns and search_path, apply). It does not migrate.
// sluice_notify=off and sluice_advisory_lock=off turn off LISTEN/NOTIFY
// and the advisory migration lock, for a PostgreSQL-compatible engine
// that lacks them (CockroachDB, YugabyteDB): workers then poll, and
// migrators take a lock row. Behind a pooler in transaction mode, the URL
// must set a default_query_exec_mode that prepares no named statement
// (Open returns ErrSharedPreparedStatements if it finds one that shares
// them), and sluice_notify=off saves the listener its LISTEN, which
// hears nothing there (docs/operations.md, "PostgreSQL behind
// PgBouncer").
func Open(ctx context.Context, url string) (*engine.Store, error) {
	url, d, err := options(url)
	if err != nil {
		return nil, err
	}
	cfg, err := config(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, onceEach(err))
	}
	if err := checkPooler(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return engine.New(d, &DB{pool: pool}), nil
}

// options takes sluice's own parameters out of a postgres:// URL and
// returns the rest, and the dialect they ask for. The rest is the URL's
// text as written, never re-encoded: pgx decodes a URL as libpq does,
// where a + is a +, so a space written %20 (options=-c%20statement_timeout%3D5s)
// must stay %20.
func options(rawURL string) (string, Dialect, error) {
	var d Dialect
	u, err := neturl.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return rawURL, d, nil // a keyword=value string, or one pgx will refuse
	}
	i := strings.IndexByte(rawURL, '?')
	if i < 0 {
		return rawURL, d, nil
	}
	var kept []string
	for _, param := range strings.Split(rawURL[i+1:], "&") {
		rawName, rawValue, _ := strings.Cut(param, "=")
		name, _ := neturl.PathUnescape(rawName)
		var off *bool
		switch name {
		case "sluice_notify":
			off = &d.NoNotify
		case "sluice_advisory_lock":
			off = &d.NoAdvisoryLock
		default:
			kept = append(kept, param)
			continue
		}
		switch v, _ := neturl.PathUnescape(rawValue); v {
		case "off", "false":
			*off = true
		case "on", "true":
			*off = false
		default:
			return "", d, fmt.Errorf("postgres: %s is %q; use on or off", name, v)
		}
	}
	if len(kept) == 0 {
		return rawURL[:i], d, nil
	}
	return rawURL[:i+1] + strings.Join(kept, "&"), d, nil
}

// config parses url, with an error that never shows it.
func config(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The message never shows the connection string, nor the parts of
		// it pgx quotes: pgx masks the password only on a best-effort basis
		// in malformed strings. The caller knows the string it passed.
		msg := err.Error()
		var pce *pgconn.ParseConfigError
		if errors.As(err, &pce) {
			msg = pce.Error()
			if inner := pce.Unwrap(); inner != nil && !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
				// A keyword=value string's detail quotes the text left.
				msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
			}
			if i := strings.LastIndex(msg, "`: "); i >= 0 {
				msg = msg[i+len("`: "):]
			}
		}
		msg = quotedText.ReplaceAllStringFunc(msg, func(q string) string {
			if len([]rune(q)) > 3 { // more than one character between the quotes
				return `"…"`
			}
			return q
		})
		return nil, fmt.Errorf("postgres: cannot parse the connection string: %s", msg)
	}
	return cfg, nil
}

// quotedText matches a quoted string in a parse error: a piece of the
// connection string, maybe of its password, unless it is one character.
var quotedText = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// DB is the store's pool over pgxpool.
type DB struct {
	pool *pgxpool.Pool
	// shared is set for a pool the app owns (OpenPool): Close leaves it
	// open.
	shared bool
}

// Pool returns the underlying pgx pool, for callers that share it.
func (d *DB) Pool() *pgxpool.Pool { return d.pool }

// Exec runs a statement in a transaction of its own at READ COMMITTED,
// sent with its BEGIN and COMMIT in one round trip: a write outside the
// store's transactions (a heartbeat, the budgets a claim creates, an
// operator's change) runs at the level the store's transactions run at
// (beginSQL), whatever default_transaction_isolation the database sets,
// and does not fail with a serialization error where another transaction
// wrote the row first.
func (d *DB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return engine.Result{}, err
	}
	t := &ownTx{conn: conn, begin: beginSQL}
	res, err := t.execCommit(ctx, q, args)
	if err != nil {
		_ = t.Rollback(context.WithoutCancel(ctx))
		return engine.Result{}, err
	}
	return res, nil
}

// ExecAlone runs a statement on its own, in no transaction block and at
// the session's default isolation: for VACUUM, which refuses to run in
// a transaction.
func (d *DB) ExecAlone(ctx context.Context, q string) error {
	_, err := d.pool.Exec(ctx, q)
	return err
}

// Query runs a statement that returns rows.
func (d *DB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	return d.pool.Query(ctx, q, args...)
}

// Begin starts a transaction on a connection of the pool; BEGIN goes out
// with its first statements.
func (d *DB) Begin(ctx context.Context) (engine.Tx, error) { return d.begin(ctx, beginSQL) }

// BeginRead starts a read-only transaction at REPEATABLE READ, whose
// statements all read one snapshot, on a connection of the pool; BEGIN
// goes out with its first statement, which takes the snapshot.
func (d *DB) BeginRead(ctx context.Context) (engine.Tx, error) { return d.begin(ctx, beginReadSQL) }

// begin acquires a connection for a transaction that begin begins.
func (d *DB) begin(ctx context.Context, begin string) (engine.Tx, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &ownTx{conn: conn, begin: begin}, nil
}

// Close closes the pool, unless the app owns it (OpenPool).
func (d *DB) Close() error {
	if !d.shared {
		d.pool.Close()
	}
	return nil
}

// WrapTx adapts a caller's pgx.Tx.
func (d *DB) WrapTx(tx any) (engine.Executor, error) {
	if err := engine.CheckTx(tx); err != nil {
		return nil, err
	}
	if t, ok := tx.(pgx.Tx); ok {
		return Tx{tx: t}, nil
	}
	return nil, fmt.Errorf("the postgres store takes a pgx.Tx, not a %T", tx)
}

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func execOn(ctx context.Context, q querier, sql string, args []any) (engine.Result, error) {
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return engine.Result{}, err
	}
	return engine.Result{RowsAffected: tag.RowsAffected()}, nil
}

// Tx is a transaction: the store's own, or a caller's pgx.Tx passed to
// EnqueueTx.
type Tx struct{ tx pgx.Tx }

// Exec runs a statement.
func (t Tx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	return execOn(ctx, t.tx, q, args)
}

// Query runs a statement that returns rows.
func (t Tx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	return t.tx.Query(ctx, q, args...)
}

// Commit commits.
func (t Tx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// Rollback aborts; it is a no-op after Commit.
func (t Tx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// Dialect is PostgreSQL's SQL. Its zero value is for PostgreSQL itself;
// the options are for compatible engines that lack a feature
// (CockroachDB and YugabyteDB lack both).
type Dialect struct {
	// NoNotify leaves out LISTEN/NOTIFY: enqueues and promotions wake no
	// one in other processes, whose workers find new jobs at their next
	// poll. Defaults to false.
	NoNotify bool
	// NoAdvisoryLock serializes migrators with a lock row in
	// sluice_migrations instead of an advisory lock. Defaults to false.
	NoAdvisoryLock bool
}

var _ engine.Dialect = Dialect{}

// Name returns "postgres".
func (Dialect) Name() string { return "postgres" }

// Migrations returns the embedded migrations.
func (Dialect) Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// IsUndefinedTable recognises undefined_table and undefined_column.
func (Dialect) IsUndefinedTable(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && (e.Code == "42P01" || e.Code == "42703")
}

// IsDataError recognises the server refusing a value: SQLSTATE class 22
// (data exception: text that is not valid UTF-8 or holds NUL, a number out
// of range, a value too long), class 23 (integrity constraint violation)
// and 54000 (program limit exceeded, as for an index row too large).
func (Dialect) IsDataError(err error) bool {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return false
	}
	return strings.HasPrefix(e.Code, "22") || strings.HasPrefix(e.Code, "23") || e.Code == "54000"
}

var _ engine.DataErrorer = Dialect{}

// IsRetryable recognises deadlocks, serialization failures and lock
// timeouts.
func (Dialect) IsRetryable(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && (e.Code == "40P01" || e.Code == "40001" || e.Code == "55P03")
}

// Pipeline sends stmts in one batch: one round trip.
func (t Tx) Pipeline(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	br := t.tx.SendBatch(ctx, b)
	if err := readBatch(br, false, stmts, read, false); err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}
