package dburl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicequeue/sluice/store/dburl"
)

// TestRedactKeywordValueSpacingAndEscapes guards Redact's promise: "The
// values of parameters that carry a password (password=, sslpassword=, in
// a query or a keyword=value string) are masked too", for the spellings
// libpq and pgx accept: spaces around '=', backslash-escaped quotes inside
// a quoted value, a backslash-escaped space outside quotes. The key was
// cut at the last space before '=' (so "password =" named no key), a space
// after '=' ended the value at once, and the closing quote was taken to be
// the first quote, escaped or not: the password, or its end, was shown in
// Redact's result and in RedactError's message.
func TestRedactKeywordValueSpacingAndEscapes(t *testing.T) {
	for raw, want := range map[string]string{
		"host=db user=app password = s3cret":             "host=db user=app password = xxxxx",
		"host=db user=app password= s3cret":              "host=db user=app password= xxxxx",
		"host=db user=app password\t=\ts3cret sslmode=x": "host=db user=app password\t=\txxxxx sslmode=x",
		`host=db password='a b\' c d' user=app`:          "host=db password=xxxxx user=app",
		`host=db password=a\ b\ c3d4 user=app`:           "host=db password=xxxxx user=app",
		// A quote inside an unquoted value is the password's own.
		"postgres://u@h/db?password=it's&sslmode=disable": "postgres://u@h/db?password=xxxxx&sslmode=disable",
	} {
		if got := dburl.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
	// RedactError masks the password as written and as the driver reads it
	// (unquoted, unescaped), wherever the message quotes it.
	for raw, secret := range map[string]string{
		"host=db user=app password = s3cret":    "s3cret",
		"host=db user=app password= s3cret":     "s3cret",
		`host=db password='a b\' c d' user=app`: "a b' c d",
		`host=db password=a\ b\ c3d4 user=app`:  "a b c3d4",
	} {
		err := dburl.RedactError(errors.New("bad password "+secret+" in "+raw), raw)
		if strings.Contains(err.Error(), secret) {
			t.Errorf("RedactError for %q = %q: shows the password", raw, err)
		}
		if strings.Contains(err.Error(), "c d") || strings.Contains(err.Error(), "c3d4") {
			t.Errorf("RedactError for %q = %q: shows part of the password", raw, err)
		}
	}
}

// TestRedactURLPasswordsWithAwkwardCharacters guards Redact's promise to
// mask a URL's password and keep the user, host and database visible,
// for cases that held when reviewed: '@', '%' and ':' in a password, IPv6
// hosts, unix sockets, several hosts, '@' in the query, an upper-case
// scheme or parameter name, a space in a SQLite path.
func TestRedactURLPasswordsWithAwkwardCharacters(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://u:p%40ss%25w0rd@[::1]:5432/db":                     "postgres://u:xxxxx@[::1]:5432/db",
		"postgres://u:pw%2Fx@%2Fvar%2Frun%2Fpostgresql/db":             "postgres://u:xxxxx@%2Fvar%2Frun%2Fpostgresql/db",
		"postgres://u:s3cret@/db?host=/var/run/postgresql":             "postgres://u:xxxxx@/db?host=/var/run/postgresql",
		"postgres://u:s3:cret@h/db":                                    "postgres://u:xxxxx@h/db",
		"postgres://u:s3@cret@h1:5432,h2:5433/db?application_name=a@b": "postgres://u:xxxxx@h1:5432,h2:5433/db?application_name=a@b",
		"postgres://u:s3cr%40t@h:5432/db?application_name=a@b":         "postgres://u:xxxxx@h:5432/db?application_name=a@b",
		"postgres://u@h/db?PASSWORD=zz":                                "postgres://u@h/db?PASSWORD=xxxxx",
		"POSTGRES://u:s3cret@h/db":                                     "POSTGRES://u:xxxxx@h/db",
		"sqlite:/tmp/with space?synchronous=normal":                    "sqlite:/tmp/with space?synchronous=normal",
	} {
		if got := dburl.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
	// The decoded form of a percent-encoded password is scrubbed too.
	raw := "postgres://u:p%40ss%25w0rd@h/db"
	if got := dburl.RedactError(errors.New("auth failed for p@ss%w0rd"), raw).Error(); strings.Contains(got, "p@ss%w0rd") {
		t.Errorf("RedactError kept the decoded password: %q", got)
	}
}

// TestSQLitePathNamesTheFileOrRefuses guards SQLitePath's promise: "the
// file a SQLite URL names, and false for any other URL (or one that does
// not parse)"; it held when reviewed.
func TestSQLitePathNamesTheFileOrRefuses(t *testing.T) {
	for raw, want := range map[string]string{
		"sqlite:my jobs.db": "my jobs.db",
		"sqlite:///var/lib/app/jobs.db?synchronous=normal": "/var/lib/app/jobs.db",
		"/srv/a b/jobs.db": "/srv/a b/jobs.db",
		dburl.Default:      "sluice.db",
	} {
		got, ok := dburl.SQLitePath(raw)
		if !ok || got != want {
			t.Errorf("SQLitePath(%q) = %q, %v; want %q, true", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"", "sqlite:", "sqlite:?synchronous=normal", "sqlite:x.db?journal=off", "postgres://h/db", "mysql://h/db"} {
		if got, ok := dburl.SQLitePath(raw); ok {
			t.Errorf("SQLitePath(%q) = %q, true; want false", raw, got)
		}
	}
}
