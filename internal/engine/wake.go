package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Channel is the notification channel that carries the names of queues
// that gained ready jobs ("*" for any), on databases that have one.
const Channel = "sluice_ready"

// wakeHub fans wake-ups out to the workers that share a store: from this
// process's enqueues at once, and from other processes' through the
// database's notifications where it has them (PostgreSQL).
type wakeHub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	cancel context.CancelFunc
}

type subscriber struct {
	queues []string
	ch     chan struct{}
	log    *slog.Logger
}

func (s *subscriber) wants(queue string) bool {
	return queue == "*" || slices.Contains(s.queues, queue)
}

// Subscribe returns a channel that receives a signal (coalesced) whenever
// one of queues may have gained ready jobs, and a function that ends the
// subscription. The first subscriber starts listening for the database's
// notifications; the last one to leave stops it. What the listener logs
// (its connection lost, and why) goes to each subscriber's log, once to
// each logger however many subscribers share it; a nil log is
// slog.Default().
func (s *Store) Subscribe(queues []string, log *slog.Logger) (<-chan struct{}, func()) {
	if log == nil {
		log = slog.Default()
	}
	sub := &subscriber{queues: slices.Clone(queues), ch: make(chan struct{}, 1), log: log}
	h := &s.wake
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[sub] = struct{}{}
	if l, ok := s.db.(Listener); ok && s.q.Notifies() && h.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		go s.listen(ctx, l)
	}
	h.mu.Unlock()
	var once sync.Once
	return sub.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs, sub)
			if len(h.subs) == 0 && h.cancel != nil {
				h.cancel()
				h.cancel = nil
			}
		})
	}
}

// Wake signals the subscribers of each queue ("*" wakes all).
func (s *Store) Wake(queues ...string) {
	h := &s.wake
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		for _, q := range queues {
			if sub.wants(q) {
				select {
				case sub.ch <- struct{}{}:
				default:
				}
				break
			}
		}
	}
}

// warn logs msg to each distinct logger of the subscribers (to
// slog.Default() when none is left).
func (h *wakeHub) warn(msg string, args ...any) {
	h.mu.Lock()
	var logs []*slog.Logger
	for sub := range h.subs {
		if !slices.Contains(logs, sub.log) {
			logs = append(logs, sub.log)
		}
	}
	h.mu.Unlock()
	if len(logs) == 0 {
		logs = append(logs, slog.Default())
	}
	for _, l := range logs {
		l.Warn(msg, args...)
	}
}

// listen relays the database's notifications until ctx ends, reconnecting
// after a failure with a pause that grows while the failures follow one
// another (1 s, 2 s, 4 s … 30 s) and starts again at 1 s once a
// connection has listened. Since no notification is heard while the
// connection is down, it wakes every worker when the connection fails
// (for a notification lost with it) and again once it listens again (for
// those sent in between); workers also poll meanwhile. A listener that
// hears nothing (ErrNotificationsUnheard: a pooler in transaction mode)
// is not started again: workers poll.
func (s *Store) listen(ctx context.Context, l Listener) {
	const first, most = time.Second, 30 * time.Second
	pause := first
	missed := false // a connection failed: notifications went unheard
	for ctx.Err() == nil {
		err := l.Listen(ctx, Channel, func() {
			pause = first
			if missed {
				missed = false
				s.Wake("*")
			}
		}, func(queue string) { s.Wake(queue) })
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotificationsUnheard) {
			s.wake.warn("sluice: notifications do not arrive through this connection; workers poll instead", "err", err)
			s.Wake("*")
			return
		}
		s.wake.warn("sluice: notifications lost; workers poll until they return", "err", err, "retry_in", pause)
		missed = true
		s.Wake("*")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(pause*2, most)
	}
}
