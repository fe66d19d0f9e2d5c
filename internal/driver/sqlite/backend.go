package sqlite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Backend is SQLite's entry in the table of backends: sqlite:PATH,
// file:PATH or a bare path, with ?synchronous=normal|full.
func Backend() engine.Backend {
	return engine.Backend{
		Name:    "sqlite",
		Schemes: []string{"sqlite", "file", ""},
		Dialect: Dialect{},
		Check: func(rawURL string) error {
			_, _, err := parseURL(rawURL)
			return err
		},
		Open: OpenURL,
		Scratch: func(_ context.Context, dir string) (string, func(context.Context) error, error) {
			// Tests trade durability on power loss for speed.
			u := URL(filepath.Join(dir, "sluice.db")) + "?synchronous=normal"
			return u, func(context.Context) error { return nil }, nil
		},
	}
}

// OpenURL opens the database file a sqlite:PATH, file:PATH or bare-path
// URL names, with the options its query sets.
func OpenURL(ctx context.Context, rawURL string) (*engine.Store, error) {
	path, opts, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, path, opts)
}

// URL returns the sqlite: URL that names the file at path: the '%', '?'
// and '#' of the path percent-encoded, as a URL's path needs them.
func URL(path string) string {
	return "sqlite:" + escapePath(path)
}

// escapePath percent-encodes the characters of path that a URL's path
// cannot hold as they are: '%' (an escape), '?' (the query) and '#' (the
// fragment).
func escapePath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
}

// parseURL returns the file and the options rawURL names. A sqlite: or
// file: URL's path is percent-decoded, as a URL's is (sqlite:a%20b.db is
// the file "a b.db"), and may not hold a fragment ('#'); a bare path is
// the file name as written, '%' and '#' included. Either may end in a
// query (?synchronous=normal).
func parseURL(rawURL string) (string, Options, error) {
	rest, isURL := rawURL, false
	for _, scheme := range []string{"sqlite:", "file:"} {
		if len(rest) >= len(scheme) && strings.EqualFold(rest[:len(scheme)], scheme) {
			rest = strings.TrimPrefix(rest[len(scheme):], "//")
			isURL = true
			break
		}
	}
	path, query, _ := strings.Cut(rest, "?")
	var opts Options
	if isURL {
		if strings.Contains(rest, "#") {
			return "", opts, errors.New("sqlite: the URL holds a '#', which starts a URL's fragment and names no file: write a '#' of the file name as %23")
		}
		dec, err := url.PathUnescape(path)
		if err != nil {
			return "", opts, fmt.Errorf("sqlite: the URL's file name is not percent-encoded as a URL's path must be (%w): write a '%%' of the file name as %%25 (a bare file path is not decoded)", err)
		}
		path = dec
	}
	if path == "" {
		return "", opts, fmt.Errorf("sqlite: the URL names no file (sqlite:PATH)")
	}
	if strings.ContainsRune(path, 0) {
		return "", opts, errors.New("sqlite: the file name holds a NUL byte")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("sqlite: the URL's query: %w", err)
	}
	for k := range q {
		switch k {
		case "synchronous":
			opts.Synchronous = q.Get(k)
		default:
			return "", opts, fmt.Errorf("sqlite: unknown URL parameter %q (known: synchronous)", k)
		}
	}
	if s := strings.ToUpper(opts.Synchronous); s != "" && s != SyncFull && s != SyncNormal {
		return "", opts, fmt.Errorf("sqlite: synchronous must be full or normal, not %q", opts.Synchronous)
	}
	return path, opts, nil
}

// Path returns the file a SQLite URL names: a URL's path percent-decoded,
// a bare path as it is.
func Path(rawURL string) (string, error) {
	path, _, err := parseURL(rawURL)
	return path, err
}
