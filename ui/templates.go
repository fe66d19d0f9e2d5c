package ui

import (
	"fmt"
	"html/template"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
)

// pageNames are the templates, each rendered inside layout.html.
var pageNames = []string{"overview", "jobs", "job", "budgets", "budget", "concurrency", "recurring", "limits", "confirm", "error"}

var funcs = template.FuncMap{
	"ago":   func(t, now time.Time) string { return human.In(t, now) },
	"stamp": human.Stamp,
	"micros": func(us int64) time.Time {
		if us == 0 {
			return time.Time{}
		}
		return time.UnixMicro(us).UTC()
	},
	"nanos": func(ns int64) time.Time { return time.Unix(0, ns).UTC() },
	"clip":  human.Clip,
	"rate":  func(v float64) string { return fmt.Sprintf("%.2f/s", v) },
	"dur":   func(d time.Duration) string { return d.String() },
	// counted pairs a bounded count with what it counts, for the "count"
	// template.
	"counted": func(c engine.Count, what string) countLine { return countLine{Count: c, What: what} },
}

// parsePages parses every page with the layout.
func parsePages() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}
