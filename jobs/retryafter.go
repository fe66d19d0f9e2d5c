package jobs

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfterError sends a job back to wait after an upstream said so.
type retryAfterError struct {
	d  time.Duration // a wait, or
	at time.Time     // a time, from an HTTP date
}

func (e *retryAfterError) Error() string {
	if !e.at.IsZero() {
		return "upstream asked to retry after " + e.at.UTC().Format(http.TimeFormat)
	}
	return fmt.Sprintf("upstream asked to retry after %s", e.d)
}

// wait returns how long to wait from now, at least 0.
func (e *retryAfterError) wait(now time.Time) time.Duration {
	if !e.at.IsZero() {
		return max(e.at.Sub(now), 0)
	}
	return max(e.d, 0)
}

// RetryAfter returns an error that, returned by a handler, sends the job
// back to wait for d without spending an attempt, and pushes every budget
// the job ran under (its kind's rate limits and its queue's) so that no job
// sharing them is admitted before then: an upstream 429 slows the whole
// budget, not one job. The worker caps d at MaxRetryAfter.
func RetryAfter(d time.Duration) error { return &retryAfterError{d: d} }

// RetryAfterResponse is RetryAfter for an upstream response's Retry-After
// header, in seconds or as an HTTP date; without a usable header it waits
// fallback.
func RetryAfterResponse(resp *http.Response, fallback time.Duration) error {
	if resp != nil {
		if d, at, ok := parseRetryAfter(resp.Header.Get("Retry-After")); ok {
			return &retryAfterError{d: d, at: at}
		}
	}
	return &retryAfterError{d: fallback}
}

// ParseRetryAfter reads a Retry-After header's value, in seconds or as an
// HTTP date, as a wait from now.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	d, at, ok := parseRetryAfter(value)
	if !ok {
		return 0, false
	}
	if !at.IsZero() {
		return max(at.Sub(now), 0), true
	}
	return d, true
}

func parseRetryAfter(value string) (time.Duration, time.Time, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, time.Time{}, false
	}
	if strings.Trim(value, "0123456789") == "" {
		// delay-seconds: digits only (RFC 9110), so no sign; too many for
		// an int64 is as long as a wait can be.
		secs, err := strconv.ParseInt(value, 10, 64)
		if err != nil || secs > int64(math.MaxInt64/time.Second) {
			// More seconds than a Duration holds: the longest wait,
			// which MaxRetryAfter then caps, rather than a product
			// that wraps round to a short or negative one.
			return time.Duration(math.MaxInt64), time.Time{}, true
		}
		return time.Duration(secs) * time.Second, time.Time{}, true
	}
	if at, err := http.ParseTime(value); err == nil {
		return 0, at, true
	}
	return 0, time.Time{}, false
}
