package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen holds a connection of its own LISTENing on channel, calls
// listening once LISTEN succeeded, then fn with each payload until ctx is
// done (it returns nil) or the connection fails.
func (d *DB) Listen(ctx context.Context, channel string, listening func(), fn func(string)) error {
	conn, closeConn, err := d.listenConn(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer closeConn()
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
