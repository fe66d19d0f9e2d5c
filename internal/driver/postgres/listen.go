package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicequeue/sluice/internal/engine"
)

// hearWithin bounds how long a new listener waits for the notification it
// sends itself through the pool (hearsItself). A direct connection hears
// it within milliseconds.
var hearWithin = 5 * time.Second

// hearsItself listens on a channel of its own, sends it a notification
// through the pool, and waits for it on conn. A pooler in transaction
// mode (PgBouncer's pool_mode = transaction) passes the LISTEN to a server
// connection that goes back to its pool, and drops what that connection
// hears while conn waits idle: the notification never comes, and it
// returns engine.ErrNotificationsUnheard (after an UNLISTEN *, for the
// server connection that took the probe's LISTEN). It runs before the LISTEN on
// sluice's channel, so that a pooled server connection is not left
// listening there, where each NOTIFY would reach it for as long as it
// lives (PgBouncer logs "got packet 'A' from server when not linked" for
// each one).
func (d *DB) hearsItself(ctx context.Context, conn *pgx.Conn) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "sluice_probe_" + hex.EncodeToString(b)
	probe := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "LISTEN "+probe); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, "NOTIFY "+probe); err != nil {
		return fmt.Errorf("notify itself: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, hearWithin)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wait)
		switch {
		case err == nil && n.Channel == name:
			_, err := conn.Exec(ctx, "UNLISTEN "+probe)
			return err
		case err == nil:
			continue
		case ctx.Err() == nil && errors.Is(wait.Err(), context.DeadlineExceeded):
			// The server connection that took the LISTEN is back in the
			// pooler's pool; an otherwise idle pooler hands it to conn
			// again.
			unlisten, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_, _ = conn.Exec(unlisten, "UNLISTEN *")
			return fmt.Errorf("a notification sent through the pool did not arrive within %v: "+
				"a pooler in transaction mode (PgBouncer's pool_mode = transaction) between sluice and PostgreSQL drops them: "+
				"add sluice_notify=off to the URL, or connect directly or through a session-mode pool: %w", hearWithin, engine.ErrNotificationsUnheard)
		default:
			return err
		}
	}
}

// Listen holds a connection of its own LISTENing on channel, calls
// listening once LISTEN succeeded, then fn with each payload until ctx is
// done (it returns nil) or the connection fails. Through a pooler, it
// first checks that the connection hears a notification sent through the
// pool (hearsItself), and returns engine.ErrNotificationsUnheard if it
// does not.
func (d *DB) Listen(ctx context.Context, channel string, listening func(), fn func(string)) error {
	conn, closeConn, err := d.listenConn(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer closeConn()
	// A direct connection hears what is sent through the pool; one through
	// a pooler may not (hearsItself).
	if pooled, err := pooled(ctx, conn); err != nil {
		return fmt.Errorf("listen: %w", err)
	} else if pooled {
		if err := d.hearsItself(ctx, conn); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listen: %w", err)
		}
		fn(n.Payload)
	}
}

// listenConn connects outside the pool as the pool makes its own
// connections: from a copy of its ConnConfig, through its BeforeConnect
// hook (which may set a password that rotates, such as an IAM token, or
// the address of the primary) and its AfterConnect hook (which may set up
// the session), with a connect timeout of 2 minutes unless the config
// sets one. Closing it calls the pool's BeforeClose hook first. The
// acquire hooks (PrepareConn, BeforeAcquire, AfterRelease) do not apply:
// the connection is never acquired from the pool.
func (d *DB) listenConn(ctx context.Context) (conn *pgx.Conn, closeConn func(), err error) {
	cfg := d.pool.Config() // a copy, ConnConfig included
	cc := cfg.ConnConfig
	if cc.ConnectTimeout <= 0 {
		cc.ConnectTimeout = 2 * time.Minute // as pgxpool's: a dial never hangs for ever
	}
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, nil, fmt.Errorf("the pool's BeforeConnect: %w", err)
		}
	}
	conn, err = pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	closeConn = func() {
		if cfg.BeforeClose != nil {
			cfg.BeforeClose(conn)
		}
		_ = conn.Close(context.WithoutCancel(ctx))
	}
	if cfg.AfterConnect != nil {
		if err := cfg.AfterConnect(ctx, conn); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, nil, fmt.Errorf("the pool's AfterConnect: %w", err)
		}
	}
	return conn, closeConn, nil
}
