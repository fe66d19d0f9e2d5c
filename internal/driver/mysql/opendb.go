package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
)

// driverPacket is go-sql-driver/mysql's default bound on a packet, which
// a pool opened without maxAllowedPacket keeps.
const driverPacket = 64 << 20

// OpenDB returns a store over a *sql.DB the app already has (opened with
// go-sql-driver/mysql), so that the app and sluice share its connections
// and the app can enqueue inside its own transactions on it
// (Client.EnqueueTx with a *sql.Tx). The app owns the pool: Store.Close
// leaves it open.
//
// sluice's transactions run at READ COMMITTED: when the pool's sessions
// default to another level, each of the store's transactions asks for it
// (one statement more per transaction; set transaction_isolation in the
// DSN to spare it). The sessions' time zone must not shift for daylight
// saving (UTC, a fixed offset, or SYSTEM on a UTC host), since the
// database's clock is read through it: OpenDB refuses one that does.
// Their character set must be utf8mb4 (the driver's default): OpenDB
// refuses a pool whose sessions use another (charset=gbk in its DSN, say),
// in which args would be changed or refused, and, with the driver's
// interpolateParams, could end the literal they are written in and run
// SQL of their own. Whether the pool interpolates is the app's choice:
// sluice runs either way (without it, each statement is prepared on the
// server first: one round trip more). It checks that the database
// answers; it does not migrate.
func OpenDB(ctx context.Context, db *sql.DB) (*engine.Store, error) {
	if db == nil {
		return nil, errors.New("mysql: OpenDB: the *sql.DB is nil")
	}
	var version, tz, systemTZ string
	var step, packet int64
	if err := db.QueryRowContext(ctx, `SELECT VERSION(), @@auto_increment_increment, @@max_allowed_packet, @@session.time_zone, @@system_time_zone`).
		Scan(&version, &step, &packet, &tz, &systemTZ); err != nil {
		return nil, fmt.Errorf("mysql: OpenDB: %w", err)
	}
	if !steadyZone(tz, systemTZ) {
		return nil, fmt.Errorf("mysql: OpenDB: the pool's sessions run in time zone %q (system %q), whose daylight-saving shifts would move the clock sluice reads; "+
			"open the pool with time_zone='+00:00' (DSN parameter time_zone=%%27%%2B00%%3A00%%27)", tz, systemTZ)
	}
	d, err := classify(version, step, min(packet, driverPacket))
	if err != nil {
		return nil, err
	}
	variable := "@@session.transaction_isolation"
	if d.mariaDB {
		variable = "@@session.tx_isolation"
	}
	var isolation string
	var autocommit int
	if err := db.QueryRowContext(ctx, `SELECT `+variable+`, @@session.autocommit`).Scan(&isolation, &autocommit); err != nil {
		return nil, fmt.Errorf("mysql: OpenDB: %w", err)
	}
	if autocommit == 0 {
		return nil, errors.New("mysql: OpenDB: the pool's sessions run with autocommit off, where a statement sluice runs outside a transaction (an enqueue, a heartbeat) would never commit; " +
			"open the pool with autocommit=1 in its DSN (or drop SET autocommit=0 from the server's init_connect)")
	}
	if err := checkSessionCharset(ctx, db); err != nil {
		return nil, fmt.Errorf("mysql: OpenDB: %w: open the pool with charset=utf8mb4 in its DSN, or none (the driver's default)", err)
	}
	var opts *sql.TxOptions
	if !strings.EqualFold(strings.ReplaceAll(isolation, " ", "-"), "READ-COMMITTED") {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return engine.New(d, sqldb.NewSharedDB(db, opts).DiscardReadOnly(readOnlySession)), nil
}

// fixedOffset matches a time zone given as an offset from UTC.
var fixedOffset = regexp.MustCompile(`^[+-]\d{1,2}:\d{2}$`)

// steadyZone reports whether a session time zone never shifts.
func steadyZone(tz, systemTZ string) bool {
	utc := func(z string) bool {
		switch strings.ToUpper(z) {
		case "UTC", "ETC/UTC", "GMT", "ETC/GMT", "Z", "ZULU", "UNIVERSAL", "COORDINATED UNIVERSAL TIME":
			return true
		}
		return false
	}
	switch {
	case fixedOffset.MatchString(tz), utc(tz):
		return true
	case strings.EqualFold(tz, "SYSTEM"):
		return utc(systemTZ) || fixedOffset.MatchString(systemTZ)
	}
	return false
}
