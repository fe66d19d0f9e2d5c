package ui

import (
	"html/template"
	"net/http"
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
	Window  time.Duration
	Capped  bool
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

// budgets reads the budgets (all, or the one named), with the limit in
// force on each and its admissions.
func (s *server) budgets(r *http.Request, only string) ([]budgetRow, map[string][]time.Time, bool, error) {
	ctx := r.Context()
	now := s.opts.Now()
	all, err := s.store.ListBudgets(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	var infos []engine.BudgetInfo
	for _, b := range all {
		if only == "" || b.Name == only {
			infos = append(infos, b)
		}
	}
	if only != "" && len(infos) == 0 {
		row, _, err := s.store.GetBudgetInfo(ctx, only)
		if err != nil {
			return nil, nil, false, err
		}
		infos = append(infos, engine.BudgetInfo{BudgetRow: row})
	}
	rows := make([]engine.BudgetRow, len(infos))
	for i, b := range infos {
		rows[i] = b.BudgetRow
	}
	limits, err := jobs.DescribeBudgets(ctx, s.store, s.reg, rows, now)
	if err != nil {
		return nil, nil, false, err
	}
	admitted, capped, err := s.store.AdmissionsSince(ctx, now.Add(-admissionWindow), maxAdmissionRows)
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

func (s *server) budgetList(w http.ResponseWriter, r *http.Request) {
	rows, _, capped, err := s.budgets(r, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "budgets", "Budgets", &budgetListData{Budgets: rows, Window: admissionWindow, Capped: capped})
}

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
	rows, admitted, capped, err := s.budgets(r, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &budgetDetailData{Budget: rows[0], Found: rows[0].UpdatedAt != 0, Window: admissionWindow, Capped: capped, PerSecond: -1}
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
