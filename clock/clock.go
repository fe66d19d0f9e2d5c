// Package clock is the time source every sluice component takes: the
// system clock in production and a Fake, moved by hand, in tests.
//
// Every time-based decision in sluice (when a job is due, how long a retry
// backs off, whether a rate-limit budget has room, when a heartbeat is
// stale) reads a Clock, so a test can walk hours of schedule in
// microseconds and get the same answer every run.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a single-shot timer made by a Clock.
type Timer interface {
	// C is the channel the timer sends on. It is nil for AfterFunc timers.
	C() <-chan time.Time
	// Stop prevents the timer from firing and reports whether it was
	// still pending.
	Stop() bool
	// Reset changes the timer to fire after d and reports whether it was
	// still pending.
	Reset(d time.Duration) bool
}

// System returns the clock of the host: time.Now and the runtime's timers.
func System() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{t: time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return systemTimer{t: time.AfterFunc(d, f)}
}

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

// IsSystem reports whether c is the host's clock (or nil, which every
// sluice component reads as the host's clock).
func IsSystem(c Clock) bool {
	if c == nil {
		return true
	}
	_, ok := c.(systemClock)
	return ok
}

// OrSystem returns c, or the system clock when c is nil.
func OrSystem(c Clock) Clock {
	if c == nil {
		return System()
	}
	return c
}
