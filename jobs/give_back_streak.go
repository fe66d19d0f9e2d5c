package jobs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// giveBackStreak is a job's give-backs in a row: claims of it that each
// gave it back (giveBack), with no other claim between them. Any other
// claim ends the streak: a run of its handler (an attempt, a snooze, a
// 429), a release at shutdown, or a run lost with its worker. So does a
// last error that is no give-back's (an operator's retry of a job that
// failed for good, say). A retry of a job that waits given back ends no
// streak: no worker ran it.
//
// The streak is recorded in the last error each give-back writes, after
// givenBackText, as "N time(s) in a row since T, the last at claim C":
// no migration, and nothing on the claim path. The record counts only
// when C is the job's claim before this one; a failed attempt or a 429
// replaces the last error, and a snooze or a release keeps it but is a
// claim of its own. Only a give-back writes a record that reads as one:
// the store quotes givenBackText in every other last error, a handler's
// error or panic, a cancel's reason, an operator's
// (engine.LastErrorText), so that a handler's error that quotes another
// job's record counts for nothing. A record that holds more give-backs
// than the job has claims that spent no attempt is none of a give-back's
// either (one a version before that quoting stored from a handler's
// error: a failed attempt spends one), and counts for nothing.
type giveBackStreak struct {
	// times counts the give-backs in the streak, the last one included.
	times int64
	// since is when the first one was, on the clock of the worker that
	// made it, in UTC to the second.
	since time.Time
	// claim is the claim (Job.Claims) that made the last one.
	claim int64
}

// String is the streak as its record in a last error.
func (s giveBackStreak) String() string {
	return fmt.Sprintf("%d time(s) in a row since %s, the last at claim %d", s.times, s.since.Format(time.RFC3339), s.claim)
}

// after is s, the streak of a job's give-back at claim s.claim, made
// part of the streak recorded in the job's last error when that streak's
// last give-back was the claim before this one. unspent counts the job's
// claims before this one that spent no attempt (Job.Claims - Job.Attempt,
// as claimed): every give-back is one. The streak keeps the earlier of
// the two times, so that a worker whose clock ran ahead does not put off
// its end for good.
func (s giveBackStreak) after(lastError string, unspent int64) giveBackStreak {
	last, ok := parseGiveBackStreak(lastError)
	if !ok || last.claim != s.claim-1 || last.times > unspent || last.times == math.MaxInt64 {
		return s
	}
	s.times = last.times + 1
	if last.since.Before(s.since) {
		s.since = last.since
	}
	return s
}

// parseGiveBackStreak reads the streak recorded in a last error: after
// the last givenBackText in it, as String writes it and giveBack follows
// it with ")". Anything else (no record, one cut short or changed, a
// count or a claim below 1) is none.
func parseGiveBackStreak(lastError string) (giveBackStreak, bool) {
	i := strings.LastIndex(lastError, givenBackText)
	if i < 0 {
		return giveBackStreak{}, false
	}
	rest := lastError[i+len(givenBackText):]
	times, rest, ok1 := strings.Cut(rest, " time(s) in a row since ")
	since, rest, ok2 := strings.Cut(rest, ", the last at claim ")
	claim, _, ok3 := strings.Cut(rest, ")")
	if !ok1 || !ok2 || !ok3 {
		return giveBackStreak{}, false
	}
	var s giveBackStreak
	var err1, err2, err3 error
	s.times, err1 = strconv.ParseInt(times, 10, 64)
	s.since, err2 = time.Parse(time.RFC3339, since)
	s.claim, err3 = strconv.ParseInt(claim, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || s.times < 1 || s.claim < 1 {
		return giveBackStreak{}, false
	}
	return s, true
}
