package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicequeue/sluice/internal/keys"
)

// MaxRunAt is the latest time a job may be scheduled for: the end of the
// year 9999. Later times do not fit the stored microseconds on every
// database (and past the year 294246 not in an int64 at all).
var MaxRunAt = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)

// ArgsLimiter is implemented by dialects whose server caps the size of one
// statement, and so the args one job may carry (MySQL's
// max_allowed_packet).
type ArgsLimiter interface {
	// MaxArgsBytes is the largest encoded args one job may carry; 0 means
	// the server sets no cap below sluice's own.
	MaxArgsBytes() int
}

// MaxArgsBytes returns the largest encoded args one job may carry on s, or
// 0 when the database sets no cap below sluice's own.
func MaxArgsBytes(s *Store) int {
	if l, ok := s.d.(ArgsLimiter); ok {
		return max(l.MaxArgsBytes(), 0)
	}
	return 0
}

// CheckKey refuses a key or a name that cannot be stored alike on every
// database (see keys.Check: 1 to 255 bytes of valid UTF-8 without control
// characters). what names it in the error ("rate-limit key", "queue"); a
// key that is too long wraps ErrKeyTooLong.
func CheckKey(what, key string) error {
	err := keys.Check(what, key)
	if err != nil && errors.Is(err, keys.ErrTooLong) {
		return tooLong{err}
	}
	return err
}

// MaxReasonBytes is the longest reason an operator may record when
// cancelling a job: as long as the error text kept for a failed run. The
// reason is kept as any last error is (LastErrorText): a give-back's mark
// in it quoted, which makes it longer, then cut to that bound again.
const MaxReasonBytes = MaxErrorBytes

// CheckReason refuses an operator's reason that not every database could
// store: invalid UTF-8, a NUL, or more than MaxReasonBytes.
func CheckReason(reason string) error {
	switch {
	case !utf8.ValidString(reason):
		return fmt.Errorf("the reason is not valid UTF-8")
	case strings.IndexByte(reason, 0) >= 0:
		return fmt.Errorf("the reason holds a NUL byte")
	case len(reason) > MaxReasonBytes:
		return fmt.Errorf("the reason is %d bytes; at most %d are kept", len(reason), MaxReasonBytes)
	}
	return nil
}

// CheckQueue refuses a queue name that is not a valid key (CheckKey) or
// that holds a comma: a list of queues (a worker's --queues, and the
// queues a worker registers with) is written with commas between them.
func CheckQueue(what, name string) error {
	if err := CheckKey(what, name); err != nil {
		return err
	}
	if strings.Contains(name, ",") {
		return fmt.Errorf("%s %q holds a comma, which separates the queues of a list (--queues); name it without one", what, name)
	}
	return nil
}

// CheckProcessName refuses the Name of a worker or a dispatcher that not
// every database stores alike in its process row: the rule of a key
// (CheckKey), under which it also prints safely in `sluice processes`.
// An empty name is left to the caller's default (the host name).
func CheckProcessName(name string) error {
	if name == "" {
		return nil
	}
	return CheckKey("Name", name)
}

// MaxQueueListBytes is the longest list of queues a worker may claim
// from, as its process row keeps it: the names joined with commas, in a
// column that holds 65,535 bytes on MySQL (TEXT), and the same bound on
// every database.
const MaxQueueListBytes = 65535

// CheckQueueList refuses a worker's list of queues whose names, joined
// with commas, are longer than MaxQueueListBytes.
func CheckQueueList(queues []string) error {
	n := len(queues) - 1
	for _, q := range queues {
		n += len(q)
	}
	if n > MaxQueueListBytes {
		return fmt.Errorf("the %d queues' names take %d bytes joined with commas; a worker's list takes at most %d (its process row keeps it): split the queues between workers", len(queues), n, MaxQueueListBytes)
	}
	return nil
}

// tooLong adds ErrKeyTooLong to a keys error without changing its text.
type tooLong struct{ error }

func (e tooLong) Unwrap() []error { return []error{e.error, ErrKeyTooLong} }

// validate refuses a job that the database would refuse, or store other
// than given: the last line behind the checks of package jobs.
func (s *Store) validate(j NewJob) error {
	if err := CheckKey("kind", j.Kind); err != nil {
		return err
	}
	if err := CheckQueue("queue", j.Queue); err != nil {
		return err
	}
	switch {
	case j.Priority < math.MinInt32 || j.Priority > math.MaxInt32:
		return fmt.Errorf("priority %d is out of range: it must fit 32 bits (%d to %d)", j.Priority, math.MinInt32, math.MaxInt32)
	case j.MaxAttempts < 0 || j.MaxAttempts > math.MaxInt32:
		return fmt.Errorf("max attempts %d is out of range: it must fit 32 bits (at most %d)", j.MaxAttempts, math.MaxInt32)
	case j.RunAt.After(MaxRunAt):
		return fmt.Errorf("run at %s is out of range: it must not be after %s", j.RunAt.UTC().Format(time.RFC3339), MaxRunAt.Format(time.RFC3339))
	case j.Conc != nil && (j.Conc.To < 1 || j.Conc.To > math.MaxInt32):
		return fmt.Errorf("concurrency limit %d is out of range: it must be between 1 and %d", j.Conc.To, math.MaxInt32)
	}
	if n := rateKeysBytes(j.RateKeys); n > MaxRateKeysBytes {
		return fmt.Errorf("the job's %d rate-limit keys take %d bytes; a job's keys take at most %d (its row keeps them): declare fewer limits on the kind, or shorter keys", len(j.RateKeys), n, MaxRateKeysBytes)
	}
	if err := checkFair(j); err != nil {
		return err
	}
	return s.checkArgs(j.Args)
}

// MaxRateKeysBytes is the most a job's rate-limit keys take, encoded
// (EncodeRateKeys): what MySQL's TEXT column keeps. A server not in strict
// mode would cut a longer list short instead of refusing it.
const MaxRateKeysBytes = 65535

// rateKeysBytes is len(EncodeRateKeys(keys)), without building it.
func rateKeysBytes(keys []RateKey) int {
	n := max(len(keys)-1, 0) // the newlines between them
	for _, k := range keys {
		n += len(k.Key)
		if k.Cost > 1 {
			n += 1 + len(strconv.Itoa(k.Cost))
		}
	}
	return n
}

// checkArgs refuses args the database would refuse or change: bytes that
// are not valid UTF-8, a NUL byte (PostgreSQL's text refuses it), or more
// than the server carries in one statement.
func (s *Store) checkArgs(args []byte) error {
	if !utf8.Valid(args) {
		return fmt.Errorf("args are not valid UTF-8 (at byte %d)", invalidAt(args))
	}
	if i := bytes.IndexByte(args, 0); i >= 0 {
		return fmt.Errorf("args hold a NUL byte (at byte %d)", i)
	}
	if m := MaxArgsBytes(s); m > 0 && len(args) > m {
		return fmt.Errorf("args are %d bytes; the %s server carries at most %d bytes of args in one job", len(args), s.d.Name(), m)
	}
	return nil
}

// invalidAt returns the offset of the first byte of b that does not start
// a valid UTF-8 sequence.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}
