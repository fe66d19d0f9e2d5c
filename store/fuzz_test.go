package store

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/store/dburl"
)

// cancelled makes postgres.Open return once the URL is parsed, without
// connecting.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

var fuzzSchemes = []string{"postgres://", "postgresql://", "mysql://", "sqlite://", "postgres:", "mysql:", "MySQL://"}

// FuzzPasswordNeverShown builds database URLs that carry a password, in
// the userinfo or as a password parameter, and checks that parsing them
// never panics and that the password appears neither in Redact's output
// nor in any error: mysql.Config's, postgres.Open's, and those Open's
// check returns.
func FuzzPasswordNeverShown(f *testing.F) {
	for _, s := range []struct {
		scheme, form uint8
		user, secret string
		rest         string
	}{
		{0, 0, "app", "s3cret", "db.example:5432/app"},
		{2, 0, "u", "pw", "host:notaport/db"},
		{0, 0, "u", "pw", "[::1/db"},
		{2, 0, "u", "pw", "[::1/db"},
		{0, 0, "u", "pw", "[::1]:5432/db?sslmode=disable"},
		{2, 0, "root", "pa/ss", "127.0.0.1:3306/test"},
		{0, 0, "u", "12?x=1", "host/db"},
		{0, 0, "u", "a#b", "host/db"},
		{2, 0, "u", "a@b@c", "host/db"},
		{0, 0, "u", "p%zzw", "host/db"},
		{2, 0, "u", "p%41w", "host/db"},
		{0, 0, "u", "se:cr:et", "host:1/db"},
		{0, 0, "u", "sp ace", "host/db"},
		{2, 0, "u", "tab\tnl\n", "host/db"},
		{0, 0, "u", "ünïcode", "host/db"},
		{0, 0, "", "nouser", "host/db"},
		{0, 0, "u", "pw", "host/db?application_name=a@b"},
		{0, 0, "u", "1@h?Zq", "host/db"},
		{4, 0, "u", "pw", "host/db"},
		{5, 0, "u", "pw", "host/db"},
		{3, 0, "u", "pw", "x.db?synchronous=normal"},
		{0, 1, "u", "pw", "host/db"},
		{1, 1, "u", "p&w", "host:5432/db"},
		{2, 1, "u", "p w", "host/db"},
		{0, 1, "u", "p'w", "[::1/db"},
	} {
		f.Add(s.scheme, s.form, s.user, s.secret, s.rest)
	}
	f.Fuzz(func(t *testing.T, scheme, form uint8, user, secret, rest string) {
		// A user name as anyone writes one: the characters that end or split
		// the userinfo would be percent-encoded.
		if strings.ContainsAny(user, ":@/?#") {
			return
		}
		pw := "Zq" + secret + "Zq"
		raw := fuzzSchemes[int(scheme)%len(fuzzSchemes)] + user
		if form%2 == 0 {
			raw += ":" + pw + "@" + rest
		} else {
			raw += "@" + rest + "?sslmode=disable&password=" + pw
		}

		// None of these may panic, whatever the input.
		redacted := dburl.Redact(raw)
		_, cfgErr := mysql.Config(raw)
		_, pgErr := postgres.Open(cancelled, raw) // parses, then gives up at once
		_, openErr := check(raw)
		openErr = dburl.RedactError(openErr, raw)

		// The password must be distinctive to be looked for: found once in
		// the URL, and without the mask's letter.
		if strings.Contains(pw, "x") || strings.Count(raw, pw) != 1 {
			return
		}
		require.NotContains(t, redacted, pw, "dburl.Redact(%q)", raw)
		for name, err := range map[string]error{"mysql.Config": cfgErr, "postgres.Open": pgErr, "Open": openErr} {
			if err != nil {
				require.NotContains(t, err.Error(), pw, "%s(%q)", name, raw)
			}
		}
	})
}

// FuzzRedactNeverPanics feeds anything to the URL parsing: it must not
// panic, and Redact must be idempotent (masking twice changes nothing).
func FuzzRedactNeverPanics(f *testing.F) {
	for _, s := range []string{
		"", ":", "://", "@", ":@", "postgres://", "postgres://@", "postgres://:@", "mysql://u:pw@host:notaport/db",
		"postgres://u:pw@[::1/db", "sqlite:sluice.db", "/var/lib/x.db", "host=h password='a b' user=u",
		"postgres://h/db?password=&sslpassword", "mysql://u:p@w@h/db?x=%zz", "a:b:c@d@e/f?g=h@i#j",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := dburl.Redact(raw)
		require.Equal(t, r, dburl.Redact(r), "dburl.Redact(%q)", raw)
		_, _ = mysql.Config(raw)
		_, err := check(raw)
		_ = dburl.RedactError(err, raw)
	})
}
