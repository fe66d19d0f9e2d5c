package postgres_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
)

// The listener's connection, outside the app's pool, is made as the pool
// makes its own: through the pool's BeforeConnect (here it supplies the
// port, as a hook would a rotating password, so that without it the
// connection fails, and names the connections, so that the test can tell
// the listener's from other tests' in the shared database) and
// AfterConnect, and closed through its BeforeClose, so that hooks that
// set a session up, or count the connections they opened, see it as they
// see the pool's.
func TestTheListenersConnectionGoesThroughThePoolsHooks(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(postgresBackend(t).URL(t))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := uint16(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	realPort := cfg.ConnConfig.Port
	cfg.ConnConfig.Port = closed
	var mu sync.Mutex
	connected, closedPIDs := map[uint32]bool{}, map[uint32]bool{}
	app := fmt.Sprintf("listen_hooks_%d", time.Now().UnixNano())
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Port = realPort
		cc.RuntimeParams["application_name"] = app
		return nil
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		mu.Lock()
		defer mu.Unlock()
		connected[c.PgConn().PID()] = true
		return nil
	}
	cfg.BeforeClose = func(c *pgx.Conn) {
		mu.Lock()
		defer mu.Unlock()
		closedPIDs[c.PgConn().PID()] = true
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.OpenPool(ctx, pool)
	require.NoError(t, err)

	listenCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	var listener uint32
	err = s.DB().(engine.Listener).Listen(listenCtx, engine.Channel, func() {
		// The one of the pool's connections that LISTENs.
		require.NoError(t, pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&listener))
		stop()
	}, func(string) {})
	require.NoError(t, err, "the listener listened, until its context ended")
	require.NotZero(t, listener)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, connected[listener], "the pool's AfterConnect did not see the listener's connection")
	require.True(t, closedPIDs[listener], "the pool's BeforeClose did not see the listener's connection closed")
}

// A listener connected straight to PostgreSQL hears what is sent through
// the pool: it does not probe for it (hearsItself), which under a loaded
// server could wait past its bound and turn notifications off for the
// rest of the run. With the probe's bound at a nanosecond, a direct
// listener still listens.
func TestADirectListenerDoesNotProbeForItsNotifications(t *testing.T) {
	defer postgres.SetHearWithin(time.Nanosecond)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, postgresBackend(t).URL(t))
	require.NoError(t, err)
	defer s.Close()
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.DB().(engine.Listener).Listen(ctx, engine.Channel, func() { close(listening) }, func(string) {})
	}()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("the listener returned before it listened: %v", err)
	}
	cancel()
	require.NoError(t, <-done)
}
