package docsnippets_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// page is a markdown file of the repository: its path from the root and
// its lines outside fenced code blocks (prose) and inside them (code,
// with the fence's info string).
type page struct {
	path  string
	prose []line
	code  []block
}

// line is a line of a page and its number, from 1.
type line struct {
	n    int
	text string
}

// block is a fenced code block: its info string ("go", "sh", "") and its
// lines.
type block struct {
	info  string
	start int
	lines []string
}

// pages reads README.md, CHANGELOG.md, docs/*.md and the other markdown
// files of the repository.
func pages(t *testing.T) []page {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			paths = append(paths, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, paths, filepath.Join(root, "docs", "guarantees.md"), "the docs are where this test looks for them")
	out := make([]page, 0, len(paths))
	for _, p := range paths {
		out = append(out, readPage(t, p))
	}
	return out
}

// readPage splits the markdown file at path into prose and code blocks.
func readPage(t *testing.T, path string) page {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rel, err := filepath.Rel(root, path)
	require.NoError(t, err)
	pg := page{path: filepath.ToSlash(rel)}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	var open *block
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		fence := strings.TrimLeft(text, " \t")
		switch {
		case open == nil && strings.HasPrefix(fence, "```"):
			open = &block{info: strings.TrimSpace(strings.TrimPrefix(fence, "```")), start: n}
		case open != nil && strings.HasPrefix(fence, "```"):
			pg.code = append(pg.code, *open)
			open = nil
		case open != nil:
			open.lines = append(open.lines, text)
		default:
			pg.prose = append(pg.prose, line{n: n, text: text})
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, open, "%s: a code block opened at line %d is never closed", path, func() int {
		if open == nil {
			return 0
		}
		return open.start
	}())
	return pg
}
