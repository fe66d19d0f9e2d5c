package clock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeNowMovesOnlyWhenTold(t *testing.T) {
	f := clock.NewFake(epoch)
	require.Equal(t, epoch, f.Now())
	f.Advance(90 * time.Second)
	require.Equal(t, epoch.Add(90*time.Second), f.Now())
	f.Set(epoch)
	require.Equal(t, epoch, f.Now())
}

func TestFakeTimerFiresAtDeadline(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Minute)
	f.Advance(59 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case at := <-tm.C():
		require.Equal(t, epoch.Add(time.Minute), at)
	default:
		t.Fatal("did not fire at its deadline")
	}
}

func TestFakeTimersFireInOrderAndSeeTheirOwnTime(t *testing.T) {
	f := clock.NewFake(epoch)
	var order []time.Duration
	seen := make(chan time.Duration, 3)
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		d := d
		tm := f.NewTimer(d)
		go func() { <-tm.C(); seen <- d }()
	}
	f.Advance(time.Second)
	order = append(order, <-seen)
	f.Advance(2 * time.Second)
	order = append(order, <-seen, <-seen)
	require.Equal(t, time.Second, order[0])
	require.ElementsMatch(t, []time.Duration{2 * time.Second, 3 * time.Second}, order[1:])
}

func TestFakeStopAndReset(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	require.True(t, tm.Stop())
	require.False(t, tm.Stop())
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	tm.Reset(time.Second)
	f.Advance(time.Second)
	<-tm.C()
}

func TestFakeAfterFunc(t *testing.T) {
	f := clock.NewFake(epoch)
	var called atomic.Int32
	done := make(chan struct{})
	f.AfterFunc(time.Minute, func() { called.Add(1); close(done) })
	f.Advance(30 * time.Second)
	require.Zero(t, called.Load())
	f.Advance(30 * time.Second)
	<-done
	require.EqualValues(t, 1, called.Load())
}

func TestWaitForTimers(t *testing.T) {
	f := clock.NewFake(epoch)
	ready := f.WaitForTimers(1)
	go func() { <-f.NewTimer(time.Second).C() }()
	<-ready
	require.Equal(t, 1, f.Waiting())
}

func TestIsSystem(t *testing.T) {
	require.True(t, clock.IsSystem(nil))
	require.True(t, clock.IsSystem(clock.System()))
	require.False(t, clock.IsSystem(clock.NewFake(epoch)))
}
