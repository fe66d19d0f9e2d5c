package concurrency_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/concurrency"
)

// TestSemaphoreRulesHoldForAnySequence drives a semaphore through random
// declarations (up and down), takes, gives and expiries, against a plain
// count of holders.
func TestSemaphoreRulesHoldForAnySequence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s concurrency.Semaphore
		s.Declare(rapid.IntRange(1, 5).Draw(t, "to"))
		holders := 0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				s.Declare(rapid.IntRange(1, 5).Draw(t, "to"))
			case 1, 2, 3, 4:
				before := s
				took := s.Take()
				if took != (before.Held < before.To) {
					t.Fatalf("Take at held %d, To %d returned %v", before.Held, before.To, took)
				}
				if took {
					holders++
				}
			case 5, 6, 7, 8:
				gave := s.Give()
				if gave != (holders > 0) {
					t.Fatalf("Give with %d holders returned %v", holders, gave)
				}
				if gave {
					holders--
				}
			case 9:
				if n := s.Expire(); n != holders {
					t.Fatalf("Expire freed %d, %d were held", n, holders)
				}
				holders = 0
			}
			if s.Held != holders || s.Held < 0 {
				t.Fatalf("held %d, holders %d", s.Held, holders)
			}
			if s.Free() != max(s.To-s.Held, 0) || s.Free() < 0 {
				t.Fatalf("free %d with held %d, To %d", s.Free(), s.Held, s.To)
			}
		}
	})
}

func TestALoweredLimitDrainsBeforeANewGrant(t *testing.T) {
	s := concurrency.Semaphore{To: 2}
	require.True(t, s.Take())
	require.True(t, s.Take())
	s.Declare(1)
	require.Zero(t, s.Free())
	require.True(t, s.Give(), "one holder finishes")
	require.False(t, s.Take(), "one holder is still out: To 1 is full")
	require.True(t, s.Give())
	require.True(t, s.Take(), "drained: a slot is free again")
	require.False(t, s.Take())
	require.True(t, s.Give())
	require.False(t, s.Give(), "a slot nobody holds cannot be given back")
	require.Zero(t, s.Held)
}
