package sqlite

import (
	"context"
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
			u := "sqlite:" + filepath.Join(dir, "sluice.db") + "?synchronous=normal"
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

// parseURL returns the file and the options rawURL names.
func parseURL(rawURL string) (string, Options, error) {
	rest := rawURL
	for _, scheme := range []string{"sqlite:", "file:"} {
		if len(rest) >= len(scheme) && strings.EqualFold(rest[:len(scheme)], scheme) {
			rest = strings.TrimPrefix(rest[len(scheme):], "//")
			break
		}
	}
	path, query, _ := strings.Cut(rest, "?")
	var opts Options
	if path == "" {
		return "", opts, fmt.Errorf("sqlite: the URL names no file (sqlite:PATH)")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("sqlite: %w", err)
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

// Path returns the file a SQLite URL names.
func Path(rawURL string) (string, error) {
	path, _, err := parseURL(rawURL)
	return path, err
}
