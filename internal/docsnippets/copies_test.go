package docsnippets_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// adapted are the lines of the pages' Go snippets that snippets_test.go
// spells otherwise, each with the reason: a name the page shares with
// another page's snippet, or a func main of which there can be one.
var adapted = map[string]string{
	"func main() { os.Exit(cli.Main(reg)) }":                                   "README.md: readmeMain",
	"func main() {":                                                            "operations.md: operationsMain",
	"jobs.ConcurrencyLimit(concurrency.Limit[SyncAccount]{":                    "concurrency.md: SyncAccountC, as README.md declares SyncAccount",
	"Key: func(a SyncAccount) any { return a.AccountID }, // To defaults to 1": "concurrency.md: SyncAccountC",
	"func handle(ctx context.Context, j *jobs.Job[SyncAccount]) error {":       "observability.md: handleMetadata, handleLogging",
	`import "github.com/sluicequeue/sluice/otelsluice"`:                        "observability.md: imported with the others",
}

// spaces is a run of white space, which the comparison ignores.
var spaces = regexp.MustCompile(`\s+`)

// TestDocSnippetsAreTheOnesCompiledHere checks that every line of every Go
// snippet of the docs is a line of snippets_test.go (white space aside),
// one of the adapted lines, or an elision ("…"): a snippet edited on its page without its
// copy here would no longer be the one that compiles.
func TestDocSnippetsAreTheOnesCompiledHere(t *testing.T) {
	raw, err := os.ReadFile("snippets_test.go")
	require.NoError(t, err)
	here := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		here[norm(l)] = true
	}
	used := map[string]bool{}
	snippets := 0
	for _, pg := range pages(t) {
		if pg.path != "README.md" && !strings.HasPrefix(pg.path, "docs/") {
			continue
		}
		for _, b := range pg.code {
			if b.info != "go" {
				continue
			}
			snippets++
			for i, l := range b.lines {
				n := norm(l)
				switch {
				case n == "" || n == "…" || here[n]: // "…": what the page leaves out
				case adapted[n] != "":
					used[n] = true
				default:
					t.Errorf("%s:%d: a line of the Go snippet at line %d is not in snippets_test.go: %s",
						pg.path, b.start+1+i, b.start, n)
				}
			}
		}
	}
	require.GreaterOrEqual(t, snippets, 20, "the pages' Go snippets were not found")
	for l, why := range adapted {
		if !used[l] {
			t.Errorf("adapted line %q (%s) is in no snippet any more: remove it from adapted", l, why)
		}
	}
}

// norm is l with its runs of white space made one space, trimmed.
func norm(l string) string { return strings.TrimSpace(spaces.ReplaceAllString(l, " ")) }
