package docsnippets_test

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink is a markdown link's target: [text](target) or
// [text](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// mdHeading is an ATX heading: its text.
var mdHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// htmlAnchor is an anchor a page declares by hand.
var htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// inlineLink is a link inside a heading, whose text the heading keeps.
var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// TestDocLinksReachTheirFilesAndSections checks every link of every
// markdown page of the repository that points inside it: the file (or
// directory) exists, and the section a #fragment names is a heading of
// that page, as GitHub spells its anchors. A renamed heading or a moved
// page fails here instead of sending a reader to the top of a page.
func TestDocLinksReachTheirFilesAndSections(t *testing.T) {
	all := pages(t)
	anchors := map[string]map[string]bool{}
	for _, pg := range all {
		anchors[pg.path] = anchorsOf(pg)
	}
	checked := 0
	for _, pg := range all {
		for _, l := range pg.prose {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				if err := checkLink(pg.path, target, anchors); err != nil {
					t.Errorf("%s:%d: link %s: %v", pg.path, l.n, target, err)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d links found in the docs: the pattern no longer matches them", checked)
	}
}

// checkLink checks target, a link of the page at from, against the
// repository's files and the pages' anchors.
func checkLink(from, target string, anchors map[string]map[string]bool) error {
	file, frag, _ := strings.Cut(target, "#")
	to := from
	if file != "" {
		to = path.Clean(path.Join(path.Dir(from), file))
		if strings.HasPrefix(to, "../") {
			return fmt.Errorf("points outside the repository")
		}
		if _, err := os.Stat(path.Join(root, to)); err != nil {
			return fmt.Errorf("no such file: %s", to)
		}
	}
	if frag == "" || !strings.HasSuffix(to, ".md") {
		return nil
	}
	if !anchors[to][frag] {
		return fmt.Errorf("%s has no section #%s", to, frag)
	}
	return nil
}

// anchorsOf returns the anchors of a page: its headings' slugs, numbered
// from the second of a name on as GitHub numbers them, and the anchors it
// declares in HTML.
func anchorsOf(pg page) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range pg.prose {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := mdHeading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor of a heading: its text without markup,
// lower-cased, with every character but letters, digits, '-', '_' and
// spaces dropped and spaces turned to '-'.
func slug(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestSlugSpellsAnchorsAsGitHubDoes pins the slugs of headings this
// repository's links use.
func TestSlugSpellsAnchorsAsGitHubDoes(t *testing.T) {
	for heading, want := range map[string]string{
		"Delivery: at least once":                 "delivery-at-least-once",
		"Reading `sluice explain`":                "reading-sluice-explain",
		"Kinds that share a Group":                "kinds-that-share-a-group",
		"Changing `To` — and [why](x.md)":         "changing-to--and-why",
		"Unlimited jobs do not wait for a budget": "unlimited-jobs-do-not-wait-for-a-budget",
		"With rate limits and concurrency limits": "with-rate-limits-and-concurrency-limits",
		"Tasks of a concurrency-limited kind":     "tasks-of-a-concurrency-limited-kind",
		"MySQL notes":                             "mysql-notes",
		"snake_case keys, 429s & 2262":            "snake_case-keys-429s--2262",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
