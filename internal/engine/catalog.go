package engine

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

// The statement catalog: every statement sluice runs, written once in
// sql/*.sql (see sql/README.md), rendered for one database from its
// Capabilities and its replacements when a store is made.

//go:embed sql/*.sql
var catalogFS embed.FS

// entry is one named statement or fragment of a catalog file.
type entry struct {
	fragment bool
	text     string
}

// parseCatalog reads "-- name: X" statements and "-- fragment: X" pieces
// from text. Other comment lines are dropped; a trailing ";" ends a
// statement.
func parseCatalog(text string) (map[string]entry, error) {
	out := map[string]entry{}
	var name string
	var cur entry
	var body []string
	flush := func() error {
		if name == "" {
			return nil
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("statement %s is written twice", name)
		}
		cur.text = strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")
		out[name] = cur
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		stmtName, isStmt := strings.CutPrefix(trimmed, "-- name:")
		fragName, isFrag := strings.CutPrefix(trimmed, "-- fragment:")
		switch {
		case isStmt || isFrag:
			if err := flush(); err != nil {
				return nil, err
			}
			name, cur, body = strings.TrimSpace(stmtName), entry{fragment: isFrag}, nil
			if isFrag {
				name = strings.TrimSpace(fragName)
			}
		case strings.HasPrefix(trimmed, "--"), name == "":
		default:
			body = append(body, strings.TrimRight(line, " \t"))
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// loadCatalog reads the catalog files and applies a dialect's
// replacements.
func loadCatalog(replacements string) (map[string]entry, error) {
	all := map[string]entry{
		"JobColumns":        {fragment: true, text: JobColumns},
		"JobInfoColumns":    {fragment: true, text: JobInfoColumns},
		"BudgetColumns":     {fragment: true, text: BudgetColumns},
		"SemaphoreColumns":  {fragment: true, text: SemaphoreColumns},
		"ProcessColumns":    {fragment: true, text: ProcessColumns},
		"JobQueueNotPaused": {fragment: true, text: JobQueueNotPaused},
	}
	files, err := fs.Glob(catalogFS, "sql/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := catalogFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		entries, err := parseCatalog(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for name, e := range entries {
			if _, dup := all[name]; dup {
				return nil, fmt.Errorf("%s: %s is written twice", f, name)
			}
			all[name] = e
		}
	}
	own, err := parseCatalog(replacements)
	if err != nil {
		return nil, fmt.Errorf("dialect statements: %w", err)
	}
	for name, e := range own {
		if old, ok := all[name]; ok && old.fragment != e.fragment {
			return nil, fmt.Errorf("dialect statements: %s replaces a %s with a %s", name, kindOf(old), kindOf(e))
		}
		all[name] = e
	}
	return all, nil
}

func kindOf(e entry) string {
	if e.fragment {
		return "fragment"
	}
	return "statement"
}

var (
	fragmentRef  = regexp.MustCompile(`\{([A-Za-z]+)\}`)
	lockClause   = regexp.MustCompile(`\s*FOR UPDATE( SKIP LOCKED)?`)
	trueLiteral  = regexp.MustCompile(`\bTRUE\b`)
	falseLiteral = regexp.MustCompile(`\bFALSE\b`)
	castSuffix   = regexp.MustCompile(`::[a-z]+(\[\])?`)
	doNothing    = regexp.MustCompile(`ON CONFLICT \(([a-z_]+)[^)]*\)( WHERE .+?)? DO NOTHING`)
	lockOnly     = regexp.MustCompile(`ON CONFLICT \([a-z_]+\) DO UPDATE SET ([a-z_]+) = EXCLUDED\.[a-z_]+ WHERE (?:FALSE|0)`)
	doUpdate     = regexp.MustCompile(`ON CONFLICT \([^)]*\) DO UPDATE SET`)
	excluded     = regexp.MustCompile(`EXCLUDED\.([a-z_]+)`)
	returningID  = regexp.MustCompile(`\s*RETURNING id$`)
)

// expand replaces {Fragment} references in text, fragments within
// fragments included.
func expand(all map[string]entry, name, text string) (string, error) {
	var err error
	for depth := 0; strings.Contains(text, "{") && err == nil; depth++ {
		if depth > 4 {
			return "", fmt.Errorf("%s: fragments nest too deep", name)
		}
		text = fragmentRef.ReplaceAllStringFunc(text, func(ref string) string {
			f, ok := all[ref[1:len(ref)-1]]
			if !ok || !f.fragment {
				err = fmt.Errorf("%s: no fragment %s", name, ref)
				return ref
			}
			return f.text
		})
	}
	return text, err
}

// spell rewrites a statement's text for a database's capabilities.
func spell(text string, c Capabilities) string {
	if !c.RowLocks {
		text = lockClause.ReplaceAllString(text, "")
	}
	if !c.Booleans {
		text = trueLiteral.ReplaceAllString(text, "1")
		text = falseLiteral.ReplaceAllString(text, "0")
	}
	if !c.Arrays {
		text = castSuffix.ReplaceAllString(text, "")
	}
	if c.DuplicateKey {
		text = doNothing.ReplaceAllString(text, "ON DUPLICATE KEY UPDATE $1 = $1")
		text = lockOnly.ReplaceAllString(text, "ON DUPLICATE KEY UPDATE $1 = $1")
		text = doUpdate.ReplaceAllString(text, "ON DUPLICATE KEY UPDATE")
		text = excluded.ReplaceAllString(text, "VALUES($1)")
	}
	if !c.Returning {
		text = returningID.ReplaceAllString(text, "")
	}
	return text
}
