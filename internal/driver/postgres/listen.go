package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Listen holds a connection of its own LISTENing on channel, calls
// listening once LISTEN succeeded, then fn with each payload until ctx is
// done (it returns nil) or the connection fails.
func (d *DB) Listen(ctx context.Context, channel string, listening func(), fn func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
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
