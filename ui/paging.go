package ui

import (
	"html/template"
	"net/http"
	"net/url"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
)

// maxCount bounds the count of a listing (jobs matching a filter,
// budgets, concurrency keys): past it the page says "10000+".
const maxCount = 10000

// pager holds the links of a keyset page, for the "pager" template: to
// the first page, set when this page is not it, and to the next, empty on
// the last. Each is relative to the dashboard's base.
type pager struct {
	Base        string
	First, Next template.URL
	// FirstLabel and NextLabel name the links ("newest", "older").
	FirstLabel, NextLabel string
}

// newPager returns the links of a page of path whose listing q selects
// (without the page's own parameter, param): the page that starts at at
// (param's value, "" on the first page), followed by the one that starts
// at next ("" when this is the last).
func newPager(r *http.Request, path string, q url.Values, param, at, next, firstLabel, nextLabel string) pager {
	p := pager{Base: base(r), FirstLabel: firstLabel, NextLabel: nextLabel}
	link := func(q url.Values) template.URL {
		if len(q) == 0 {
			return template.URL(path) // #nosec: a fixed path
		}
		return template.URL(path + "?" + q.Encode()) // #nosec: url.Values.Encode escapes every value
	}
	if at != "" {
		p.First = link(q)
	}
	if next != "" {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set(param, next)
		p.Next = link(nq)
	}
	return p
}

// countLine is a count that stops at a bound and what it counts ("job(s)
// match"), for the "count" template.
type countLine struct {
	Count engine.Count
	What  string
}

// keyPageAfter reads the start of a page of budgets or concurrency keys,
// the after parameter: a key, by the rule every key follows, or "" for
// the first page.
func keyPageAfter(r *http.Request) (string, error) {
	after := r.URL.Query().Get("after")
	if after == "" {
		return "", nil
	}
	if err := keys.Check("after", after); err != nil {
		return "", err
	}
	return after, nil
}
