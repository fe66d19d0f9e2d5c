// Package driver is the table of the databases sluice runs on. Everything
// that picks a database by URL or by name — package store, the CLI, the
// bench, the tests — reads this table, so a new backend is one package
// under internal/driver and one entry here.
package driver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
)

// Backends returns every backend, in the order tests run them.
func Backends() []engine.Backend {
	return []engine.Backend{sqlite.Backend(), postgres.Backend(), mysql.Backend()}
}

// ForURL returns the backend that opens rawURL, by its scheme; a bare
// path (no scheme) is SQLite's. A string with no scheme that reads as a
// PostgreSQL keyword/value connection string ("host=db user=app
// dbname=jobs") is refused rather than taken for a file name; sqlite:PATH
// opens a file whose name really looks like one. So is a
// go-sql-driver/mysql DSN ("app:pw@tcp(db:3306)/jobs"), which would
// otherwise read as a path or as an unknown scheme.
func ForURL(rawURL string) (engine.Backend, error) {
	scheme := Scheme(rawURL)
	if scheme == "" {
		if err := keywordValueError(rawURL); err != nil {
			return engine.Backend{}, err
		}
	}
	if err := mysqlDSNError(rawURL); err != nil && !slices.ContainsFunc(Backends(), func(b engine.Backend) bool {
		return scheme != "" && slices.Contains(b.Schemes, scheme)
	}) {
		return engine.Backend{}, err
	}
	var known []string
	for _, b := range Backends() {
		if slices.Contains(b.Schemes, scheme) {
			return b, nil
		}
		for _, s := range b.Schemes {
			if s != "" {
				known = append(known, s+":")
			}
		}
	}
	return engine.Backend{}, fmt.Errorf("unknown database URL scheme %q: use %s or a file path (sqlite:PATH for a path that holds \":\")", scheme, strings.Join(known, ", "))
}

// ByName returns the backend with that name or alias.
func ByName(name string) (engine.Backend, error) {
	var known []string
	for _, b := range Backends() {
		if strings.EqualFold(name, b.Name) || slices.ContainsFunc(b.Aliases, func(a string) bool { return strings.EqualFold(a, name) }) {
			return b, nil
		}
		known = append(known, b.Name)
	}
	return engine.Backend{}, fmt.Errorf("unknown dialect %q: use %s", name, strings.Join(known, ", "))
}

// Scheme returns rawURL's scheme in lower case, or "" for a plain path (a
// Windows drive letter is not a scheme).
func Scheme(rawURL string) string {
	i := strings.Index(rawURL, ":")
	if i <= 1 {
		return ""
	}
	scheme := strings.ToLower(rawURL[:i])
	for _, r := range scheme {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return ""
		}
	}
	return scheme
}
