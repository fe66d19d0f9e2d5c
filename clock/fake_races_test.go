package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/clock"
)

// TestFakeResetAfterAnUnreadFireWaitsForItsNewDeadline guards Timer.Reset's
// promise, "Reset changes the timer to fire after d", for a fake timer that
// fired while nobody read its channel. Reset left that firing in the
// channel, so the reset timer delivered the old deadline at once, and the
// firing at the new deadline was dropped because the channel was full.
func TestFakeResetAfterAnUnreadFireWaitsForItsNewDeadline(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fires; the value is left unread
	tm.Reset(time.Hour)
	select {
	case at := <-tm.C():
		t.Fatalf("Reset(1h) timer delivered %v at once (now %v), before its new deadline", at, f.Now())
	default:
	}
	f.Advance(time.Hour)
	select {
	case at := <-tm.C():
		if want := epoch.Add(time.Second + time.Hour); !at.Equal(want) {
			t.Fatalf("delivered %v, want the reset deadline %v", at, want)
		}
	default:
		t.Fatal("Reset timer never fired at its new deadline")
	}
}

// TestFakeStopAfterAnUnreadFireLeavesNothingToRead guards Timer.Stop's
// promise, "Stop prevents the timer from firing", the way the system clock
// keeps it since Go 1.23: a fake timer that fired unread and was then
// stopped left its firing in the channel for a later receive.
func TestFakeStopAfterAnUnreadFireLeavesNothingToRead(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fires; the value is left unread
	if tm.Stop() {
		t.Fatal("Stop reported a timer that had fired as pending")
	}
	select {
	case at := <-tm.C():
		t.Fatalf("stopped timer delivered %v", at)
	default:
	}
}

// TestSystemResetAfterAnUnreadFireWaits pins the behaviour the fake copies:
// an expired, unread system timer that is Reset delivers nothing before
// its new deadline (Go 1.23 timers; it fails if the module's go directive
// drops below 1.23 or GODEBUG asynctimerchan=1 is set).
func TestSystemResetAfterAnUnreadFireWaits(t *testing.T) {
	tm := clock.System().NewTimer(0)
	tm.Reset(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("system timer delivered a stale value")
	default:
	}
	tm.Stop()
}

// TestFakeConcurrentAdvancesAllCount guards the Fake's "safe for concurrent
// use" and Advance's "moves the time forward by d". Advance read the time,
// let go of the lock and then set now+d, and Set let go of it between
// firings: concurrent Advance calls lost time, and the time went backwards
// when one set a target another had already passed.
func TestFakeConcurrentAdvancesAllCount(t *testing.T) {
	f := clock.NewFake(epoch)
	const g, n = 8, 300
	// Pending timers make a move let go of the lock between firings.
	for i := 1; i <= g*n; i += 7 {
		f.AfterFunc(time.Duration(i), func() {})
	}
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				f.Advance(1)
			}
		}()
	}
	wg.Wait()
	if got, want := f.Now().Sub(epoch), time.Duration(g*n); got != want {
		t.Fatalf("after %d concurrent Advance(1ns) the clock moved %v, want %v", g*n, got, want)
	}
}

// TestFakeResetRacingTheAdvanceThatFiresIt guards the Fake's "safe for
// concurrent use" for a Reset that races the Advance firing the timer.
// The firing read the timer's deadline after it was taken off the list,
// outside the lock, while Reset rewrote it: a data race (seen under -race),
// and the timer sent its new deadline, a time that had not come.
func TestFakeResetRacingTheAdvanceThatFiresIt(t *testing.T) {
	for i := 0; i < 20000; i++ {
		f := clock.NewFake(epoch)
		tm := f.NewTimer(time.Second)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); f.Advance(time.Second) }()
		go func() { defer wg.Done(); tm.Reset(time.Hour) }()
		wg.Wait()
		select {
		case at := <-tm.C():
			if now := f.Now(); at.After(now) {
				t.Fatalf("iteration %d: timer sent %v while the fake time is %v", i, at, now)
			}
		default:
		}
	}
}

// TestFakeWaitForTimerAtAndMovesThatFireNothingOrAll guards promises that
// held when the fake's locking changed: WaitForTimerAt closes once a timer
// due exactly at t is pending (also one made pending by Reset, and at once
// when it already is); Advance(0) and a backwards move fire nothing; a
// huge Advance fires everything due.
func TestFakeWaitForTimerAtAndMovesThatFireNothingOrAll(t *testing.T) {
	f := clock.NewFake(epoch)
	at := epoch.Add(time.Minute)
	ready := f.WaitForTimerAt(at)
	tm := f.NewTimer(time.Hour)
	select {
	case <-ready:
		t.Fatal("WaitForTimerAt closed for a timer due at another time")
	default:
	}
	tm.Reset(time.Minute)
	<-ready
	<-f.WaitForTimerAt(at) // already pending: closed at once

	f.Advance(0)
	f.Advance(-time.Hour)
	f.Set(epoch.Add(-24 * time.Hour))
	select {
	case <-tm.C():
		t.Fatal("fired on a zero or backwards move")
	default:
	}
	var fired sync.WaitGroup
	fired.Add(1)
	f.AfterFunc(100*365*24*time.Hour, fired.Done)
	f.Advance(1<<63 - 1)
	fired.Wait()
	if got := (<-tm.C()); !got.Equal(at) {
		t.Fatalf("timer sent %v, want %v", got, at)
	}
	if f.Waiting() != 0 {
		t.Fatalf("%d timers still pending", f.Waiting())
	}
}

// TestFakeAfterFuncMayCallTheClock guards AfterFunc's "calls fn in its own
// goroutine" now that moves hold a lock from start to end: a function that
// advances the clock, resets its own timer and reads the time must not
// deadlock the move that fired it.
func TestFakeAfterFuncMayCallTheClock(t *testing.T) {
	f := clock.NewFake(epoch)
	done := make(chan time.Time)
	var tm clock.Timer
	var once sync.Once
	tm = f.AfterFunc(time.Second, func() {
		once.Do(func() {
			tm.Reset(time.Minute)
			f.Advance(time.Minute)
			done <- f.Now()
		})
	})
	f.Advance(time.Second)
	select {
	case now := <-done:
		if want := epoch.Add(time.Second + time.Minute); !now.Equal(want) {
			t.Fatalf("the function saw %v, want %v", now, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an AfterFunc function that calls the clock deadlocked")
	}
}
