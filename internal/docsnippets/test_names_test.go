package docsnippets_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// namedTest is a test the docs name: TestX, TestX* (every test of that
// prefix) or -run TestX (a pattern).
var namedTest = regexp.MustCompile(`(-run\s+)?\b(Test[A-Z]\w*)(\*)?`)

// testFunc is a test function's declaration.
var testFunc = regexp.MustCompile(`(?m)^func (Test\w*)\(t \*testing\.T\)`)

// notTests are names of the form TestX the docs use for something else.
var notTests = map[string]string{
	"TestEnv": "the field of engine.Backend naming a database's test URL variable",
}

// TestTestsTheDocsNameExist checks that every test a page names as the
// one that checks a promise exists: a renamed or deleted test leaves a
// promise the docs say is checked with nothing behind it.
func TestTestsTheDocsNameExist(t *testing.T) {
	funcs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	named := 0
	for _, pg := range pages(t) {
		if pg.path == "CHANGELOG.md" {
			continue // a release's notes name the tests of their day
		}
		for _, l := range pg.prose {
			for _, m := range namedTest.FindAllStringSubmatch(l.text, -1) {
				name, prefix := m[2], m[1] != "" || m[3] != ""
				if notTests[name] != "" {
					continue
				}
				named++
				if funcs[name] || prefix && anyPrefixed(funcs, name) {
					continue
				}
				t.Errorf("%s:%d: names %s, which no test is", pg.path, l.n, m[0])
			}
		}
	}
	require.Greater(t, named, 50, "the tests the docs name were not found")
}

// anyPrefixed reports whether a name in funcs starts with prefix.
func anyPrefixed(funcs map[string]bool, prefix string) bool {
	for f := range funcs {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}
