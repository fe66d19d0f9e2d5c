package human

import (
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Duration prints any time.Duration, but for a negative one it prints
// "-" and the negation, and math.MinInt64 is its own negation: Duration
// recurses until the goroutine's stack overflows, a fatal error no
// recover stops. In(t, now) reaches it for a t more than 292 years before
// now (t.Sub(now) saturates at math.MinInt64, whose negation In passes
// on): the CLI (`jobs`, `processes`) and every dashboard page that says
// "… ago" would die on such a time. The enqueue path clamps a past RunAt
// to now, so no stored run time reaches it today; any other stored time
// that does (a created_at or heartbeat from a wrong clock, an override's
// updated_at) kills the process. Run in a child process so that the
// overflow fails this test instead of the package's binary.
func TestReviewDataDurationOfTheMostNegativeDurationReturns(t *testing.T) {
	if os.Getenv("SLUICE_REVIEW_DATA_CHILD") == "1" {
		t.Log(Duration(math.MinInt64))
		t.Log(In(time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_REVIEW_DATA_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Fatalf("the child process died (%v):\n%s", err, strings.Join(lines[:min(len(lines), 6)], "\n"))
	}
}

// In says how far a time is as a time.Duration, which saturates at about
// 292 years: the end of the year 9999 (engine.MaxRunAt, the latest run
// time a job may have, where retries and snoozes are capped) is "in
// 106751d23h". Expected: the true distance, about 2.9 million days.
func TestReviewDataInATimeInTheYear9999IsNotSaidTo292Years(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got := In(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), now)
	if strings.Contains(got, "106751d") {
		t.Fatalf("In says %q: the year 9999 is not 292 years away", got)
	}
}
