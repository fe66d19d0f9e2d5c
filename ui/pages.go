package ui

import (
	"net/http"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store"
)

type semaphoreRow struct {
	engine.SemaphoreInfo
	Expires time.Time
}

func (s *server) concurrency(w http.ResponseWriter, r *http.Request) {
	sems, err := s.store.ListSemaphores(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := make([]semaphoreRow, len(sems))
	for i, m := range sems {
		rows[i] = semaphoreRow{SemaphoreInfo: m}
		if m.Held > 0 {
			rows[i].Expires = engine.FromMicros(m.ExpiresAt)
		}
	}
	s.render(w, r, "concurrency", "Concurrency", rows)
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
