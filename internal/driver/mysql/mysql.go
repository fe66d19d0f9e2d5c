// Package mysql is sluice's MySQL 8 / MariaDB 10.6+ store, over
// go-sql-driver/mysql.
//
// Sessions run at READ COMMITTED (so a claim's locking read takes no gap
// locks that would block enqueues) in UTC, claims lock with FOR UPDATE
// SKIP LOCKED, and the ids of a multi-row insert follow from the first one
// the server reports.
package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Config turns a mysql://user:password@host:port/database?params URL into
// the driver's configuration. The parameters are read as the driver reads
// a DSN's: its own (tls, timeout, charset, …) set it up, and the others
// are the server's session variables. The driver writes each value into
// the statement's text (interpolateParams), so a charset other than
// utf8mb4, or a collation of another character set, is refused (see
// charset). Its errors never quote the URL or any part of it, which may
// hold the password.
func Config(rawURL string) (*driver.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("mysql: malformed URL: %s", urlProblem(err))
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("mysql: URL scheme is %q, want mysql", u.Scheme)
	}
	if err := checkURLCharset(u.RawQuery); err != nil {
		return nil, err
	}
	cfg := driver.NewConfig()
	if u.RawQuery != "" {
		// A DSN of the parameters alone: no part of it is the password.
		if cfg, err = driver.ParseDSN("/?" + u.RawQuery); err != nil {
			return nil, fmt.Errorf("mysql: URL parameters: %w", err)
		}
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	cfg.Addr = net.JoinHostPort(host, port)
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" {
		return nil, errors.New("mysql: the URL names no database (mysql://user@host:3306/DATABASE)")
	}
	if !u.Query().Has("loc") {
		cfg.Loc = time.UTC
	}
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	return cfg, nil
}

// urlProblem says what is wrong with a URL that url.Parse refused, without
// the quoted and bracketed parts of its message (invalid port ":pw" after
// host), which may be pieces of a password.
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := quoted.ReplaceAllString(err.Error(), "")
	msg = bracketed.ReplaceAllString(msg, "")
	return strings.Join(strings.Fields(strings.TrimPrefix(msg, "net/url: ")), " ")
}

var (
	quoted    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"?`)
	bracketed = regexp.MustCompile(`\([^()]*\)?`)
)

// Open connects to the database at url. It does not migrate.
func Open(ctx context.Context, rawURL string) (*engine.Store, error) {
	cfg, err := Config(rawURL)
	if err != nil {
		return nil, err
	}
	d, err := probe(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Params["time_zone"] = "'+00:00'"
	// A statement the store runs outside a transaction (a plain enqueue,
	// a heartbeat) must commit as it ends: with autocommit=0 in the URL
	// or the server's init_connect it stayed in a transaction no one
	// committed, and the enqueued job was lost with the connection.
	cfg.Params["autocommit"] = "1"
	if d.mariaDB {
		cfg.Params["tx_isolation"] = "'READ-COMMITTED'"
	} else {
		cfg.Params["transaction_isolation"] = "'READ-COMMITTED'"
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysql: connect to %s: %w", cfg.Addr, err)
	}
	return engine.New(d, sqldb.NewDB(db).DiscardReadOnly(readOnlySession)), nil
}

// probe reads which server this is, how far apart its generated ids are,
// and the largest statement it accepts, and checks that its sessions use
// utf8mb4.
func probe(ctx context.Context, cfg *driver.Config) (Dialect, error) {
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return Dialect{}, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var version string
	var step, packet int64
	if err := db.QueryRowContext(ctx, `SELECT VERSION(), @@auto_increment_increment, @@max_allowed_packet`).Scan(&version, &step, &packet); err != nil {
		return Dialect{}, fmt.Errorf("mysql: connect to %s: %w", cfg.Addr, err)
	}
	if err := checkSessionCharset(ctx, db); err != nil {
		return Dialect{}, fmt.Errorf("mysql: %w: leave charset out of the URL (or set charset=utf8mb4), and no character_set_* parameter", err)
	}
	if cfg.MaxAllowedPacket > 0 && int64(cfg.MaxAllowedPacket) < packet {
		packet = int64(cfg.MaxAllowedPacket)
	}
	return classify(version, step, packet)
}

// classify returns the dialect for a server that reports version, or
// refuses a server sluice cannot run on safely: TiDB accepts FOR UPDATE
// SKIP LOCKED but ignores the FOR UPDATE, so two workers would claim the
// same jobs.
func classify(version string, step, packet int64) (Dialect, error) {
	v := strings.ToLower(version)
	if strings.Contains(v, "tidb") {
		return Dialect{}, fmt.Errorf("mysql: the server is TiDB (version %q), which ignores FOR UPDATE when SKIP LOCKED is given: two workers would run the same job, so sluice refuses to open it", version)
	}
	return Dialect{mariaDB: strings.Contains(v, "mariadb"), step: step, packet: packet}, nil
}

// Dialect is MySQL's and MariaDB's SQL.
type Dialect struct {
	mariaDB bool
	step    int64
	// packet is the largest statement the server (and the driver) accept:
	// max_allowed_packet, read when the store opens.
	packet int64
}

var _ engine.Dialect = Dialect{}

// Name returns "mysql".
func (Dialect) Name() string { return "mysql" }

// MariaDB reports whether the server is MariaDB.
func (d Dialect) MariaDB() bool { return d.mariaDB }

// Migrations returns the embedded migrations.
func (Dialect) Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// IDStep is the server's auto_increment_increment.
func (d Dialect) IDStep() int64 { return max(d.step, 1) }

// packetReserve is the room one statement keeps, besides a job's args,
// for its SQL text and its other values: at most 64 KiB, and at most half
// of a tiny packet.
const packetReserve = 64 << 10

// MaxArgsBytes is the largest args one job may carry in one statement
// under the server's max_allowed_packet: half of what the packet holds
// besides the statement's other text, because the driver sends values
// inside the statement's text, where escaping can double them (JSON's
// quotes and backslashes each take two bytes). 0 when the packet size is
// unknown.
func (d Dialect) MaxArgsBytes() int {
	if d.packet <= 0 {
		return 0
	}
	reserve := min(int64(packetReserve), d.packet/2)
	return int(max((d.packet-reserve)/2, 1))
}

// IsUndefinedTable recognises ER_NO_SUCH_TABLE and ER_BAD_FIELD_ERROR.
func (Dialect) IsUndefinedTable(err error) bool {
	var e *driver.MySQLError
	return errors.As(err, &e) && (e.Number == 1146 || e.Number == 1054)
}

// readOnlySession recognises the server refusing a write because the
// session or the server takes none: a read-only transaction (1792, the
// session's transaction_read_only), the server's read_only or
// super_read_only (1290), or InnoDB's read-only mode (1836). The store
// closes the connection that reported it (sqldb.DB.DiscardReadOnly).
func readOnlySession(err error) bool {
	var e *driver.MySQLError
	return errors.As(err, &e) && (e.Number == 1792 || e.Number == 1290 || e.Number == 1836)
}

// IsDataError recognises the server refusing a value: text that is not
// valid in the column's character set (1366, 1300), a value too long or
// out of range (1406, 1264, 1265, 1292, 1367), NULL in a NOT NULL column
// (1048, 1364), a duplicate or missing key (1062, 1452, 1451), or a failed
// CHECK constraint (3819 on MySQL, 4025 on MariaDB).
func (Dialect) IsDataError(err error) bool {
	var e *driver.MySQLError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Number {
	case 1048, 1062, 1264, 1265, 1292, 1300, 1364, 1366, 1367, 1406, 1451, 1452, 3819, 4025:
		return true
	}
	return false
}

var _ engine.DataErrorer = Dialect{}
var _ engine.ArgsLimiter = Dialect{}

// IsRetryable recognises deadlocks and lock wait timeouts, and a lock
// NOWAIT could not take (3572 on MySQL; MariaDB's is 1205).
func (Dialect) IsRetryable(err error) bool {
	var e *driver.MySQLError
	return errors.As(err, &e) && (e.Number == 1213 || e.Number == 1205 || e.Number == 3572)
}
