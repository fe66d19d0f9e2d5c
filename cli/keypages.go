package cli

import (
	"flag"
	"fmt"
	"regexp"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/internal/keys"
)

// keyPageFlags are the flags of a listing of keys (budgets, concurrency
// keys) read a page at a time, by key, as the dashboard reads them.
type keyPageFlags struct {
	limit *int
	after *string
}

// addKeyPageFlags adds --limit and --after to fs; what names the rows.
func addKeyPageFlags(fs *flag.FlagSet, what string) keyPageFlags {
	return keyPageFlags{
		limit: decimalFlag(fs, "limit", engine.DefaultPageSize, "at most `N` "+what+", by key"),
		after: fs.String("after", "", "only the "+what+" whose keys sort after `KEY`: the last key of the page before"),
	}
}

// check refuses a limit under 1 or over a page's most, and a key no
// budget or semaphore can have, as bad usage, before the database is
// opened.
func (f keyPageFlags) check() error {
	if *f.limit < 1 || *f.limit > engine.MaxPageSize {
		return Usagef("--limit is %d; it must be from 1 to %d", *f.limit, engine.MaxPageSize)
	}
	if *f.after != "" {
		if err := keys.Check("--after", *f.after); err != nil {
			return Usagef("%v", err)
		}
	}
	return nil
}

// page is the page the flags select.
func (f keyPageFlags) page() engine.KeyPage { return engine.KeyPage{After: *f.after, Limit: *f.limit} }

// moreAfter says how to list the page after one whose last key is next,
// as a command line: "" when there is none.
func (e *Env) moreAfter(command, next string) string {
	if next == "" {
		return ""
	}
	return fmt.Sprintf("more after %s: %s %s --after %s", human.Text(next), e.App.name(), command, shellWord(next))
}

// printJSONPage prints a page of keys as JSON on stdout, which holds
// nothing else, and on stderr how to list the page after it, if any: a
// script that reads the JSON is told the list goes on.
func (e *Env) printJSONPage(page any, command, next string) error {
	if err := printJSON(e, page); err != nil {
		return err
	}
	if more := e.moreAfter(command, next); more != "" {
		fmt.Fprintln(e.Stderr, more)
	}
	return nil
}

// plainWord is a word a shell reads as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellWord quotes s for a POSIX shell, when it needs it, with its
// control characters escaped (human.Text): a key holds none.
func shellWord(s string) string {
	s = human.Text(s)
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
