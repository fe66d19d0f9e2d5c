package driver

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// libpqKeywords are the keywords of a libpq (and pgx) keyword/value
// connection string, "host=db user=app dbname=jobs": one of them in a
// string of keyword=value pairs makes it a PostgreSQL connection string,
// not a file name.
var libpqKeywords = []string{
	"host", "hostaddr", "port", "dbname", "user", "password", "passfile",
	"require_auth", "channel_binding", "connect_timeout", "client_encoding",
	"options", "application_name", "fallback_application_name",
	"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
	"tcp_user_timeout", "replication", "gssencmode", "sslmode", "requiressl",
	"sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword",
	"sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni",
	"requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
	"krbsrvname", "gsslib", "gssdelegation", "service",
	"target_session_attrs", "load_balance_hosts",
	// pgx's own.
	"pool_max_conns", "pool_min_conns", "statement_cache_capacity",
	"default_query_exec_mode",
}

// keywordValueError returns the error for rawURL, a string with no scheme,
// when it reads as a keyword/value connection string rather than a file
// path, and nil otherwise. The error names the keywords, never a value: a
// value may be the password.
func keywordValueError(rawURL string) error {
	keys, ok := keywordValueKeys(rawURL)
	if !ok {
		return nil
	}
	return fmt.Errorf("the database URL looks like a keyword/value connection string (%s), not a URL: "+
		"write it as postgres://user@host:5432/db?sslmode=disable (the password as postgres://user:password@host/db or ?password=…); "+
		"a SQLite file whose name really looks like that opens as sqlite:PATH",
		strings.Join(keys, "=… ")+"=…")
}

// keywordValueKeys reports whether s is one or more keyword=value pairs
// separated by spaces, as libpq reads them (spaces may stand around '=', a
// value may be quoted with '...', a backslash escapes the character after
// it), at least one of whose keywords is libpq's; it returns the keywords.
func keywordValueKeys(s string) ([]string, bool) {
	var keys []string
	known := false
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, false
		}
		key := strings.TrimRight(s[:eq], " \t\n\r\v\f")
		if !isKeyword(key) {
			return nil, false
		}
		keys = append(keys, key)
		known = known || slices.Contains(libpqKeywords, strings.ToLower(key))
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		end, ok := valueEnd(s)
		if !ok {
			return nil, false
		}
		s = strings.TrimLeft(s[end:], " \t\n\r\v\f")
	}
	return keys, known
}

// isKeyword reports whether key is a keyword as libpq spells them: a
// letter or '_', then letters, digits and '_'.
func isKeyword(key string) bool {
	if key == "" {
		return false
	}
	for i, r := range key {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// valueEnd returns where the value s starts with ends: at the closing
// quote of a quoted value, else at the first space not escaped. A quoted
// value must be closed.
func valueEnd(s string) (int, bool) {
	if strings.HasPrefix(s, "'") {
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '\'':
				return i + 1, true
			}
		}
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case strings.IndexByte(" \t\n\r\v\f", s[i]) >= 0:
			return i, true
		}
	}
	return len(s), true
}

// mysqlDSNPattern matches the address part of a go-sql-driver/mysql DSN,
// "user:password@tcp(host:3306)/db" or "@unix(/path)/db", and the bare
// "@/db" form.
var mysqlDSNPattern = regexp.MustCompile(`@(tcp6?|unix)?\([^)]*\)/|^[^/@]*@/`)

// mysqlDSNError returns the error for rawURL, a string with no scheme,
// when it reads as a go-sql-driver/mysql DSN rather than a file path, and
// nil otherwise. The error does not quote the DSN: it holds the password.
func mysqlDSNError(rawURL string) error {
	if !mysqlDSNPattern.MatchString(rawURL) {
		return nil
	}
	return errors.New("the database URL looks like a go-sql-driver/mysql DSN (user@tcp(host)/db), not a URL: " +
		"write it as mysql://user:password@host:3306/db; " +
		"a SQLite file whose name really looks like that opens as sqlite:PATH")
}
