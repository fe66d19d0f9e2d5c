package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that only moves when told to. Timers made from it fire,
// in deadline order, when Advance or Set moves the time past their
// deadline. It is safe for concurrent use: moves (Advance, Set) are made
// one at a time, whole, so concurrent Advance calls add up, and a timer's
// Stop or Reset is ordered wholly before or after the move that fires it.
type Fake struct {
	// moveMu serializes moves: it is held by Advance and Set from reading
	// the time to the last timer fired. AfterFunc functions run in their
	// own goroutines, never under moveMu or mu, so they may call the clock.
	moveMu sync.Mutex
	// mu guards now, the timers (their list and fields) and the waiters.
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	waiters []fakeWaiter
}

type fakeWaiter struct {
	n  int       // at least n timers pending, or
	at time.Time // a timer due exactly at this time pending
	ch chan struct{}
}

func (w fakeWaiter) met(timers []*fakeTimer) bool {
	if w.at.IsZero() {
		return len(timers) >= w.n
	}
	for _, t := range timers {
		if t.at.Equal(w.at) {
			return true
		}
	}
	return false
}

// NewFake returns a fake clock that reads t until it is moved.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the time forward by d and fires every timer that falls due.
func (f *Fake) Advance(d time.Duration) {
	f.moveMu.Lock()
	defer f.moveMu.Unlock()
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.move(target)
}

// Set moves the time to t and fires every timer that falls due. Moving the
// time backwards is allowed and fires nothing.
func (f *Fake) Set(t time.Time) {
	f.moveMu.Lock()
	defer f.moveMu.Unlock()
	f.move(t)
}

// move does Set's work; the caller holds moveMu. It lets go of mu between
// firings, so that Now, NewTimer, Stop and Reset are not held off for a
// whole move (they may see the time of a timer fired on the way).
func (f *Fake) move(t time.Time) {
	for {
		f.mu.Lock()
		sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
		if len(f.timers) == 0 || f.timers[0].at.After(t) {
			f.now = t
			f.mu.Unlock()
			return
		}
		next := f.timers[0]
		f.timers = f.timers[1:]
		if next.at.After(f.now) {
			f.now = next.at
		}
		// Fired under mu, in the same step that takes it off the list: a
		// Stop or Reset comes wholly before (and it is not fired) or
		// wholly after (and Reset empties the channel of this firing).
		next.fire()
		f.mu.Unlock()
	}
}

// Waiting returns how many timers are pending.
func (f *Fake) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitForTimers returns a channel that is closed once at least n timers are
// pending. Tests use it to know that a goroutine has reached the point
// where it waits on the clock before they advance it.
func (f *Fake) WaitForTimers(n int) <-chan struct{} { return f.wait(fakeWaiter{n: n}) }

// WaitForTimerAt returns a channel that is closed once a timer due exactly
// at t is pending: the sign that the goroutine a test waits for has set the
// deadline it will wait for.
func (f *Fake) WaitForTimerAt(t time.Time) <-chan struct{} { return f.wait(fakeWaiter{at: t}) }

func (f *Fake) wait(w fakeWaiter) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.ch = make(chan struct{})
	if w.met(f.timers) {
		close(w.ch)
		return w.ch
	}
	f.waiters = append(f.waiters, w)
	return w.ch
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	f.schedule(t, d)
	return t
}

// AfterFunc calls fn in its own goroutine when the fake time reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{clock: f, fn: fn}
	f.mu.Lock()
	f.schedule(t, d)
	return t
}

// schedule sets t to fire at now+d, firing it at once when d <= 0. The
// caller holds f.mu; schedule lets go of it.
func (f *Fake) schedule(t *fakeTimer, d time.Duration) {
	t.at = f.now.Add(d)
	if d <= 0 {
		t.fire()
		f.mu.Unlock()
		return
	}
	f.timers = append(f.timers, t)
	kept := f.waiters[:0]
	var ready []chan struct{}
	for _, w := range f.waiters {
		if w.met(f.timers) {
			ready = append(ready, w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	f.mu.Unlock()
	for _, ch := range ready {
		close(ch)
	}
}

// remove drops t from the pending list, empties its channel of a firing
// nobody read (as Go 1.23 timers do on Stop and Reset), and reports whether
// it was pending. The caller holds f.mu.
func (f *Fake) remove(t *fakeTimer) bool {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	for i, p := range f.timers {
		if p == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTimer struct {
	clock *Fake
	at    time.Time // guarded by clock.mu
	ch    chan time.Time
	fn    func()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.remove(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	was := t.clock.remove(t)
	t.clock.schedule(t, d)
	return was
}

// fire sends t's deadline on its channel, or starts its function in a
// goroutine of its own (so that it may call the clock). The caller holds
// t.clock.mu; fire never blocks.
func (t *fakeTimer) fire() {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.ch <- t.at:
	default:
	}
}
