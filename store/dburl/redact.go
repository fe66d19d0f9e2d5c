package dburl

import (
	"net/url"
	"slices"
	"strings"
)

// Mask replaces a password wherever Redact and RedactError hide one.
const Mask = "xxxxx"

// minScrub is the shortest password RedactError looks for in free text:
// a shorter one would match ordinary words and mangle the message.
const minScrub = 4

// Redact returns rawURL with its password masked, for help text, errors
// and logs: postgres://app:xxxxx@db:5432/app keeps the user, host and
// database visible so the reader knows which database is meant. The values
// of parameters that carry a password (password=, sslpassword=, in a query
// or a keyword=value string) are masked too.
//
// A malformed URL is masked generously: unless the URL parses with a
// numeric port and its '@' all sit before the path, everything from the
// first ':' after the scheme to the last '@' is hidden, so that a password
// holding '/', '?', '#' or '@' is not shown whichever parser reads it.
func Redact(rawURL string) string {
	out, _ := redact(rawURL)
	return out
}

// RedactError returns err with rawURL's password masked in its message,
// wherever a driver or a parser quoted the URL or the password; errors.Is
// and errors.As still see err. A password shorter than 4 characters is
// masked where the URL is quoted whole, not looked for elsewhere (it would
// match ordinary words). It returns err itself when its message holds
// nothing to mask (and nil for nil).
func RedactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	msg := redactText(err.Error(), rawURL)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactText masks rawURL's password in s: the URL itself, then each
// secret it carries.
func redactText(s, rawURL string) string {
	red, secrets := redact(rawURL)
	if red != rawURL && rawURL != "" {
		s = strings.ReplaceAll(s, rawURL, red)
	}
	for _, sec := range secrets {
		if len(sec) >= minScrub {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns rawURL masked and the secrets it masked, longest first
// (the raw text, and its percent-decoded form when that differs).
func redact(rawURL string) (string, []string) {
	var b strings.Builder
	var secrets []string
	// hide masks raw, the text of a secret in rawURL; plain, when it is
	// not empty, is the secret as a driver reads it (unquoted, unescaped),
	// looked for in messages too.
	hide := func(raw, plain string) {
		if raw == "" {
			return
		}
		for _, s := range []string{raw, plain} {
			if s == "" || slices.Contains(secrets, s) {
				continue
			}
			secrets = append(secrets, s)
			if dec, err := url.PathUnescape(s); err == nil && dec != s && !slices.Contains(secrets, dec) {
				secrets = append(secrets, dec)
			}
		}
		b.WriteString(Mask)
	}

	rest := rawURL
	if scheme, after, ok := cutScheme(rawURL); ok {
		b.WriteString(scheme)
		rest = after
		if start, end := userinfoPassword(rawURL, rest); start >= 0 {
			// What precedes the password (the user) goes through
			// redactParams too: in a malformed URL a password parameter
			// can end up there.
			redactParams(&b, rest[:start], hide)
			hide(rest[start:end], "")
			rest = rest[end:]
		}
	}
	redactParams(&b, rest, hide)
	// Longest first, so that a secret holding a shorter one is masked whole.
	for i := 1; i < len(secrets); i++ {
		for j := i; j > 0 && len(secrets[j]) > len(secrets[j-1]); j-- {
			secrets[j], secrets[j-1] = secrets[j-1], secrets[j]
		}
	}
	return b.String(), secrets
}

// cutScheme splits "scheme:" or "scheme://" off rawURL. A string with no
// scheme (a file path, a keyword=value DSN) reports false.
func cutScheme(rawURL string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(rawURL, ':')
	if i < 1 {
		return "", rawURL, false
	}
	for j, r := range rawURL[:i] {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (j == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return "", rawURL, false
		}
	}
	n := i + 1
	if strings.HasPrefix(rawURL[n:], "//") {
		n += 2
	}
	return rawURL[:n], rawURL[n:], true
}

// userinfoPassword returns where the password sits in rest (the URL after
// its scheme), or -1, -1 when there is none: from the first ':' to the last
// '@'. Only when a URL parses, has a numeric port and its authority holds
// a password is an '@' after the authority (in a query value, say) left
// out; otherwise the password might run past a '/', '?' or '#', so the
// span ends at the last '@' of all.
func userinfoPassword(rawURL, rest string) (int, int) {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return -1, -1
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		return -1, -1
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if a := strings.LastIndexByte(authority, '@'); a > colon+1 && a < at {
		if u, err := url.Parse(rawURL); err == nil && numeric(u.Port()) {
			at = a
		}
	}
	return colon + 1, at
}

func numeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// redactParams writes s to b with the values of password parameters
// (key=value pairs split by '&', '?', ';' or spaces, whose key names a
// password) hidden. As libpq and pgx read a keyword=value string, spaces
// may stand around the '=', a value may be quoted with '...', and a
// backslash escapes the character after it (a quote inside quotes, a space
// outside them).
func redactParams(b *strings.Builder, s string, hide func(raw, plain string)) {
	for len(s) > 0 {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			b.WriteString(s)
			return
		}
		key := strings.TrimRight(s[:i], " \t\n\r\v\f")
		if j := strings.LastIndexAny(key, "?&; \t\n\r\v\f"); j >= 0 {
			key = key[j+1:]
		}
		// The '=' and the spaces after it stay visible.
		after := s[i+1:]
		n := i + 1 + len(after) - len(strings.TrimLeft(after, " \t\n\r\v\f"))
		b.WriteString(s[:n])
		s = s[n:]
		if !secretKey(key) {
			continue
		}
		end, plain := paramValue(s)
		hide(s[:end], plain)
		s = s[end:]
	}
}

// paramValue returns where the parameter value that s starts with ends,
// and the value as a driver reads it: unquoted, with its backslash escapes
// undone. A value that starts with a quote is quoted up to the next quote
// not escaped (an unclosed one runs to the end); the value runs to the
// first '&', ';' or space outside those quotes and not escaped.
func paramValue(s string) (int, string) {
	var plain strings.Builder
	quoted := strings.HasPrefix(s, "'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case i == 0 && quoted:
		case c == '\\' && i+1 < len(s):
			i++
			plain.WriteByte(s[i])
		case c == '\'' && quoted:
			quoted = false
		case !quoted && strings.IndexByte("&; \t\n\r\v\f", c) >= 0:
			return i, plain.String()
		default:
			plain.WriteByte(c)
		}
	}
	return len(s), plain.String()
}

// secretKey reports whether a parameter's key names a password.
func secretKey(key string) bool {
	if dec, err := url.QueryUnescape(key); err == nil {
		key = dec
	}
	key = strings.ToLower(key)
	return strings.Contains(key, "pass") || strings.Contains(key, "pwd") || strings.Contains(key, "secret")
}
