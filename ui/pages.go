package ui

import (
	"net/http"
	"net/url"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store"
)

type semaphoreRow struct {
	engine.SemaphoreInfo
	Expires time.Time
}

type concurrencyData struct {
	Keys []semaphoreRow
	// Count counts every concurrency key, up to maxCount.
	Count engine.Count
	Pages pager
}

// concurrency shows a keyset page of concurrency keys, by key
// (?after=KEY), and how many there are, counted up to maxCount.
func (s *server) concurrency(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	after, err := keyPageAfter(r)
	if err != nil {
		s.fail(w, r, err) // a 400: no concurrency key has such a key
		return
	}
	sems, next, err := s.store.PageSemaphores(ctx, engine.KeyPage{After: after})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &concurrencyData{Keys: make([]semaphoreRow, len(sems)), Pages: newPager(r, "concurrency", url.Values{}, "after", after, next, "first", "next")}
	for i, m := range sems {
		d.Keys[i] = semaphoreRow{SemaphoreInfo: m}
		if m.Held > 0 {
			d.Keys[i].Expires = engine.FromMicros(m.ExpiresAt)
		}
	}
	if d.Count, err = s.store.CountSemaphores(ctx, maxCount); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "concurrency", "Concurrency", d)
}

type recurringData struct {
	Known bool
	Tasks []dispatcher.TaskInfo
}

func (s *server) recurring(w http.ResponseWriter, r *http.Request) {
	d := &recurringData{}
	if s.opts.Tasks != nil {
		tasks, err := s.opts.Tasks(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		d.Known, d.Tasks = true, tasks
	}
	s.render(w, r, "recurring", "Recurring", d)
}

type limitsData struct {
	Overrides []store.Override
	// Scopes are the kinds the registry knows, as hints for a target.
	Kinds []string
}

func (s *server) limits(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListOverrides(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "limits", "Limits", &limitsData{Overrides: list, Kinds: s.reg.Kinds()})
}
