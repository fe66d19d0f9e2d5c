package keys

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxBytes is the longest key, in bytes, that every database's key columns
// and indexes accept: MySQL's key columns are VARCHAR(255) (255 characters,
// so 255 bytes always fit), and PostgreSQL's btree indexes refuse entries
// of a few kilobytes.
const MaxBytes = 255

// ErrInvalid is wrapped by every error Check returns.
var ErrInvalid = errors.New("invalid key")

// ErrTooLong is wrapped by the error Check returns for a key longer than
// MaxBytes.
var ErrTooLong = errors.New("key too long")

// previewBytes is how much of a refused key an error shows.
const previewBytes = 40

// Error is a refused key: what it is, why, and a quoted prefix of it.
type Error struct {
	// What names the key ("rate-limit key", "queue name").
	What string
	// Reason says what is wrong with it.
	Reason string
	// Preview is the start of the key, quoted with every byte that is not
	// printable ASCII escaped.
	Preview string

	tooLong bool
}

func (e *Error) Error() string { return e.What + " " + e.Preview + " " + e.Reason }

// Is reports whether target is ErrInvalid, or ErrTooLong for a key over
// MaxBytes.
func (e *Error) Is(target error) bool {
	return target == ErrInvalid || (e.tooLong && target == ErrTooLong)
}

// Check reports whether key can be stored as a key (a rate-limit budget, a
// concurrency semaphore, a coalesce key) or as a name (a kind, a queue, a
// group): it must be 1 to MaxBytes bytes of valid UTF-8 without control
// characters (NUL, tabs, line breaks, DEL, U+0080–U+009F), and must not
// end with a space (MySQL compares keys ignoring trailing spaces, so "a "
// would share "a"'s budget there and not elsewhere). The rule is the same
// on every database. what names the key in the error; the error shows a
// safely quoted prefix of the key, never the whole of it.
func Check(what, key string) error {
	if key == "" {
		return &Error{What: what, Reason: "is empty", Preview: `""`}
	}
	if len(key) > MaxBytes {
		return &Error{What: what, Preview: Preview(key), tooLong: true,
			Reason: fmt.Sprintf("is %d bytes; a key holds at most %d", len(key), MaxBytes)}
	}
	if key[len(key)-1] == ' ' {
		return &Error{What: what, Preview: Preview(key),
			Reason: "ends with a space; MySQL ignores trailing spaces when it compares keys, so a key may not end with one"}
	}
	for i, r := range key {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				return &Error{What: what, Preview: Preview(key), Reason: fmt.Sprintf("is not valid UTF-8 (byte %d is %#02x)", i, key[i])}
			}
		case unicode.IsControl(r):
			return &Error{What: what, Preview: Preview(key), Reason: fmt.Sprintf("contains %s at byte %d; keys may not hold control characters", controlName(r), i)}
		}
	}
	return nil
}

func controlName(r rune) string {
	switch r {
	case 0:
		return "a NUL byte"
	case '\t':
		return "a tab"
	case '\n', '\r':
		return "a line break"
	}
	return fmt.Sprintf("the control character %U", r)
}

// Preview quotes the start of s for an error message: at most 40 bytes,
// cut on a character boundary, every byte that is not printable ASCII
// escaped, and "..." after it when s is longer. The result is ASCII.
func Preview(s string) string {
	if len(s) <= previewBytes {
		return strconv.QuoteToASCII(s)
	}
	n := previewBytes
	for k := 0; k < utf8.UTFMax && n > 0 && !utf8.RuneStart(s[n]); k++ {
		n--
	}
	return strconv.QuoteToASCII(s[:n]) + "..."
}
