package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// listenSpy is a store pool whose Listen reports each call and each
// return, so that a test can tell when the store's listener lost its
// connection and when it listens again.
type listenSpy struct {
	engine.DB
	started chan time.Time
	ended   chan time.Time
}

func (l *listenSpy) Listen(ctx context.Context, channel string, listening func(), fn func(string)) error {
	l.started <- time.Now()
	err := l.DB.(engine.Listener).Listen(ctx, channel, listening, fn)
	l.ended <- time.Now()
	return err
}

// listening is a PostgreSQL store whose listener a test can cut: the
// store (its pool named by an application_name of its own), the spy on
// its Listen, a store on another pool of the same database (another
// process), and a function that terminates every server connection of
// the first store's.
func listening(t *testing.T) (s *engine.Store, spy *listenSpy, other *engine.Store, kill func()) {
	t.Helper()
	pg, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Fatal("LISTEN/NOTIFY is PostgreSQL's: this test needs SLUICE_TEST_POSTGRES_URL")
	}
	u := pg.URL(t)
	other = testdb.Opener(t, u)()
	_, err := other.MigrateUp(context.Background(), 0)
	require.NoError(t, err)
	app := fmt.Sprintf("listen_reconnect_%d", time.Now().UnixNano())
	own := testdb.Opener(t, u+"&application_name="+app)()
	spy = &listenSpy{DB: own.DB(), started: make(chan time.Time, 64), ended: make(chan time.Time, 64)}
	s = engine.New(own.Dialect(), spy)
	admin, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	// A session that LISTENs in the database all along, as other workers
	// would: it reads past each notification as it is sent. PostgreSQL
	// starts a new LISTEN at the furthest place another listener of the
	// database has read to, else at the queue's tail, and delivers the
	// committed notifications after it: without this session, a
	// reconnected listener could still be handed a NOTIFY sent while it
	// was down, and a test of the wake-up for what it missed could pass
	// without one.
	_, err = admin.Exec(context.Background(), "LISTEN sluice_test_reader")
	require.NoError(t, err)
	kill = func() {
		t.Helper()
		var n int
		require.NoError(t, admin.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
		require.Positive(t, n, "no connection of the store's to terminate")
	}
	return s, spy, other, kill
}

// awaitListening enqueues a job in the queue "probe" from the other pool
// until probe (a subscription to that queue) wakes: the store's listener
// then LISTENs, and heard the NOTIFY. The probes go to a queue of their
// own so that a NOTIFY of one heard late wakes no subscription to
// "default", whose wake-ups the tests count.
func awaitListening(t *testing.T, other *engine.Store, probe <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		enqueue(t, other, t0, job("e", "probe", 0))
		select {
		case <-probe:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatal("the store's listener never heard another pool's enqueue")
}

// receiveTime waits for a time on ch.
func receiveTime(t *testing.T, ch <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return time.Time{}
	}
}

// drainWake empties a subscription's channel.
func drainWake(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// docs/operations.md, "PostgreSQL notes": workers LISTEN so that "a job
// enqueued anywhere starts within milliseconds". While the listener's
// connection is down — the pause before the reconnect (1 s, growing to
// 30 s) and the reconnect itself — a NOTIFY reaches no one; so once it
// listens again, the listener wakes every worker for the jobs enqueued in
// the gap, rather than leaving them to the next PollInterval (for ever
// under a fake clock). It also wakes them when the connection drops, for
// a NOTIFY lost with it.
func TestAListenerBackAfterItsConnectionDroppedWakesForWhatItMissed(t *testing.T) {
	s, spy, other, kill := listening(t)
	ch, unsubscribe := s.Subscribe([]string{"default"}, nil)
	defer unsubscribe()
	probe, unsubscribeProbe := s.Subscribe([]string{"probe"}, nil)
	defer unsubscribeProbe()
	receiveTime(t, spy.started, "the listener to start")
	awaitListening(t, other, probe)
	drainWake(ch)

	kill()
	receiveTime(t, spy.ended, "the listener to lose its connection")
	select {
	case <-ch: // the wake-up at the loss, for what it may have missed
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up when the listener lost its connection")
	}
	// Another process enqueues while the listener is down.
	enqueue(t, other, t0, job("e", "default", 0))
	select {
	case <-spy.started:
		t.Fatal("the listener reconnected before the enqueue: the test did not make the gap it meant to")
	default:
	}

	receiveTime(t, spy.started, "the listener to reconnect")
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		// Show that the listener is back, so the missing wake-up is the
		// one for the job enqueued in the gap.
		drainWake(probe)
		awaitListening(t, other, probe)
		t.Fatal("the listener listens again, but nothing woke the workers for the job another process enqueued while it was down: it waits for the next poll")
	}
}

// The listener's pause before a reconnect grows while the failures
// follow one another (1 s, 2 s, 4 s … 30 s), and starts again at 1 s once
// a connection has listened: a long-lived worker whose LISTEN connection
// is cut now and then (failovers, an idle-connection reaper, a pooler's
// restart) is not deaf to other processes' enqueues for 30 s after every
// later drop.
func TestAListenerThatListenedAgainStartsItsBackoffAfresh(t *testing.T) {
	s, spy, other, kill := listening(t)
	probe, unsubscribe := s.Subscribe([]string{"probe"}, nil)
	defer unsubscribe()
	receiveTime(t, spy.started, "the listener to start")
	var gaps []time.Duration
	for i := 0; i < 3; i++ {
		awaitListening(t, other, probe) // a connection that worked
		kill()
		lost := receiveTime(t, spy.ended, "the listener to lose its connection")
		back := receiveTime(t, spy.started, "the listener to reconnect")
		drainWake(probe) // the wake-up at the loss, which came before the pause
		gaps = append(gaps, back.Sub(lost))
	}
	t.Logf("pauses before each reconnect: %v", gaps)
	require.Less(t, gaps[2], 2*time.Second,
		"the third drop, after connections that each listened and heard a NOTIFY, waited as long as a third failure in a row")
}
