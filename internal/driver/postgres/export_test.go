package postgres

import "time"

// SetHearWithin sets how long a new listener waits for its own
// notification, until the test ends (the returned function restores it).
func SetHearWithin(d time.Duration) func() {
	old := hearWithin
	hearWithin = d
	return func() { hearWithin = old }
}
