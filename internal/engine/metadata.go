package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicequeue/sluice/internal/keys"
)

// MaxMetadataBytes caps a job's metadata, encoded as a JSON object: room
// for a trace context and a few ids, not a place for payloads (those are
// args).
const MaxMetadataBytes = 8 << 10

// MaxMetadataKeyBytes caps one metadata key.
const MaxMetadataKeyBytes = 255

// ErrInvalidMetadata is wrapped by the error for metadata a job cannot
// carry: an empty key, a key over MaxMetadataKeyBytes or with control
// characters, a key or value that is not valid UTF-8, or more than
// MaxMetadataBytes in all.
var ErrInvalidMetadata = errors.New("invalid metadata")

// CheckMetadataEntry refuses a metadata key or value that would not be
// stored as given. A value may hold any valid UTF-8, NUL included.
func CheckMetadataEntry(key, value string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: a key is empty", ErrInvalidMetadata)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %s is not valid UTF-8", ErrInvalidMetadata, keys.Preview(key))
	case len(key) > MaxMetadataKeyBytes:
		return fmt.Errorf("%w: key %s is %d bytes; a key holds at most %d", ErrInvalidMetadata, keys.Preview(key), len(key), MaxMetadataKeyBytes)
	case strings.IndexFunc(key, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: key %s holds a control character", ErrInvalidMetadata, keys.Preview(key))
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: the value of %q is not valid UTF-8: %s", ErrInvalidMetadata, key, keys.Preview(value))
	}
	return nil
}

// EncodeMetadata checks a job's metadata and encodes it in its stored
// form, a JSON object with its keys sorted; it returns "" for none.
func EncodeMetadata(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	names := make([]string, 0, len(m))
	size := 2
	for k, v := range m {
		names = append(names, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(names)
	for _, k := range names {
		if err := CheckMetadataEntry(k, m[k]); err != nil {
			return "", err
		}
	}
	if size > 4*MaxMetadataBytes {
		// Far over the cap whatever its escapes: refuse before encoding.
		return "", fmt.Errorf("%w: %d entries of about %d bytes; metadata holds at most %d bytes", ErrInvalidMetadata, len(m), size, MaxMetadataBytes)
	}
	enc, ok := encodePlain(m, names, size)
	if !ok {
		b, err := json.Marshal(m)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrInvalidMetadata, err)
		}
		enc = string(b)
	}
	if len(enc) > MaxMetadataBytes {
		return "", fmt.Errorf("%w: %d entries are %d bytes encoded; metadata holds at most %d", ErrInvalidMetadata, len(m), len(enc), MaxMetadataBytes)
	}
	return enc, nil
}

// encodePlain encodes, without encoding/json, metadata whose keys and
// values need no escape (a trace context, ids): printable ASCII without
// '"', '\\' or the '<', '>' and '&' encoding/json escapes. It writes what
// json.Marshal would, the keys in the order of names (sorted); ok is false
// when an entry needs an escape. size is room enough for the result.
func encodePlain(m map[string]string, names []string, size int) (string, bool) {
	var b strings.Builder
	b.Grow(size)
	b.WriteByte('{')
	for i, k := range names {
		v := m[k]
		if !plainJSON(k) || !plainJSON(v) {
			return "", false
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":"`)
		b.WriteString(v)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), true
}

// plainJSON reports whether json.Marshal writes s as it is, in quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// DecodeMetadata reverses EncodeMetadata; "" is no metadata (nil).
func DecodeMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	if m, ok := decodePlain(s); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("%w: the stored metadata is not a JSON object of strings: %v", ErrInvalidMetadata, err)
	}
	return m, nil
}

// decodePlain decodes, without encoding/json, the metadata EncodeMetadata
// writes when no key or value needed an escape (a trace context, ids):
// {"k":"v",...} with no backslash and no space. Anything else is left to
// encoding/json (ok false).
func decodePlain(s string) (map[string]string, bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' || strings.IndexByte(s, '\\') >= 0 || !utf8.ValidString(s) {
		return nil, false
	}
	m := map[string]string{}
	rest := s[1 : len(s)-1]
	for rest != "" {
		k, after, ok := plainString(rest)
		if !ok || after == "" || after[0] != ':' {
			return nil, false
		}
		v, after, ok := plainString(after[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		switch {
		case after == "":
			return m, true
		case after[0] != ',' || len(after) == 1:
			return nil, false
		}
		rest = after[1:]
	}
	return m, true
}

// plainString reads a JSON string with no escape at the start of s.
func plainString(s string) (string, string, bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	v := s[1 : 1+end]
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 {
			return "", "", false
		}
	}
	return v, s[2+end:], true
}

// deferralReason is what a job records as the reason of its last deferral.
func deferralReason(key string, parked bool) string {
	if parked {
		return "rate limit " + key + " (parked past the horizon)"
	}
	return "rate limit " + key
}

// LimitWait is how long the job had waited on rate limits when it was
// claimed: from its first deferral since it last ran (DeferredAt) to the
// claim, both on the claim's clock; 0 when it was not deferred.
func (j *Job) LimitWait() time.Duration {
	if j.DeferredAt.IsZero() || j.ClaimedAt.IsZero() {
		return 0
	}
	return max(j.ClaimedAt.Sub(j.DeferredAt), 0)
}
