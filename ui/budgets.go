package ui

import (
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/jobs"
)

// Admissions are read over this window (at most maxAdmissionRows jobs).
const (
	admissionWindow  = 5 * time.Minute
	maxAdmissionRows = 100000
)

type budgetRow struct {
	engine.BudgetInfo
	Limit jobs.LimitExplanation
	// InWindow counts admissions in the last Per; WindowKnown is false
	// when Per is longer than what the dashboard reads.
	InWindow    int
	WindowKnown bool
	// Debt is how far the budget's TAT is ahead of now.
	Debt time.Duration
}

type budgetListData struct {
	Budgets []budgetRow
	// Count counts every budget, up to maxCount.
	Count  engine.Count
	Pages  pager
	Window time.Duration
	Capped bool
}

type budgetDetailData struct {
	Budget budgetRow
	Found  bool
	Chart  template.HTML
	// PerSecond is the limit's average rate, the chart's line.
	PerSecond float64
	Peak      int
	Window    time.Duration
	Capped    bool
}

// describeBudgets adds to budgets the limit in force on each and its
// admissions in the window: those of key alone when key is set (the
// database picks them out), else of every key.
func (s *server) describeBudgets(r *http.Request, infos []engine.BudgetInfo, key string) ([]budgetRow, map[string][]time.Time, bool, error) {
	ctx := r.Context()
	now := s.opts.Now()
	rows := make([]engine.BudgetRow, len(infos))
	for i, b := range infos {
		rows[i] = b.BudgetRow
	}
	limits, err := jobs.DescribeBudgets(ctx, s.store, s.reg, rows, now)
	if err != nil {
		return nil, nil, false, err
	}
	admitted, capped, err := s.store.AdmissionsSince(ctx, key, now.Add(-admissionWindow), maxAdmissionRows)
	if err != nil {
		return nil, nil, false, err
	}
	out := make([]budgetRow, len(infos))
	for i, b := range infos {
		br := budgetRow{BudgetInfo: b, Limit: limits[i]}
		if d := engine.FromNanos(b.TAT).Sub(now); d > 0 && b.TAT > 0 {
			br.Debt = d
		}
		per := br.Limit.Per
		if br.Limit.Declared && per > 0 && per <= admissionWindow {
			br.WindowKnown = true
			for _, t := range admitted[b.Name] {
				if t.After(now.Add(-per)) {
					br.InWindow++
				}
			}
		}
		out[i] = br
	}
	return out, admitted, capped, nil
}

// budgetList shows a keyset page of budgets, by key (?after=KEY), and
// how many there are, counted up to maxCount.
func (s *server) budgetList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	after, err := keyPageAfter(r)
	if err != nil {
		s.fail(w, r, err) // a 400: no budget has such a key
		return
	}
	infos, next, err := s.store.PageBudgets(ctx, engine.KeyPage{After: after})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &budgetListData{Window: admissionWindow, Pages: newPager(r, "budgets", url.Values{}, "after", after, next, "first", "next")}
	if d.Count, err = s.store.CountBudgets(ctx, maxCount); err != nil {
		s.fail(w, r, err)
		return
	}
	if d.Budgets, _, d.Capped, err = s.describeBudgets(r, infos, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "budgets", "Budgets", d)
}

// budgetDetail shows one budget, read by its key, with a chart of its
// admissions.
func (s *server) budgetDetail(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		s.back(w, r, "budgets", "name a budget to see it", true)
		return
	}
	if err := keys.Check("budget key", key); err != nil {
		s.fail(w, r, err) // a 400: no budget has such a key
		return
	}
	info, found, err := s.store.BudgetWaiting(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, admitted, capped, err := s.describeBudgets(r, []engine.BudgetInfo{info}, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &budgetDetailData{Budget: rows[0], Found: found, Window: admissionWindow, Capped: capped, PerSecond: -1}
	now := s.opts.Now()
	secs := int(admissionWindow/time.Second) + 1 // the last second holds now
	perSec := make([]float64, secs)
	start := now.Add(-admissionWindow)
	for _, t := range admitted[key] {
		if i := int(t.Sub(start) / time.Second); i >= 0 && i < secs {
			perSec[i]++
			d.Peak = max(d.Peak, int(perSec[i]))
		}
	}
	if l := d.Budget.Limit; l.Declared && l.Per > 0 {
		d.PerSecond = float64(l.To) / l.Per.Seconds()
	}
	d.Chart = lineChart(600, 120, []chartSeries{{Class: "admitted", Values: perSec}}, d.PerSecond)
	s.render(w, r, "budget", "Budget "+key, d)
}
