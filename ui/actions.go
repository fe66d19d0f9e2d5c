package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/store"
)

// storeClock is the clock actions decide on: the database's, with the
// dashboard's for what is only shown.
func (s *server) storeClock() engine.Clock { return engine.DatabaseTime(s.opts.Now) }

// jobAction retries or cancels one job.
func (s *server) jobAction(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	to := "jobs/" + strconv.FormatInt(id, 10)
	switch r.PathValue("action") {
	case "retry":
		_, err = s.store.RetryJobs(r.Context(), s.storeClock(), []int64{id})
	case "cancel":
		_, err = s.store.CancelJobs(r.Context(), s.storeClock(), []int64{id}, "cancelled from the dashboard")
	default:
		http.NotFound(w, r)
		return
	}
	if errors.Is(err, engine.ErrNotFound) {
		// No page to go back to: the job's own is a 404.
		s.fail(w, r, err)
		return
	}
	if err != nil {
		s.back(w, r, to, err.Error(), true)
		return
	}
	s.back(w, r, to, fmt.Sprintf("job %d: %s done", id, r.PathValue("action")), false)
}

type confirmData struct {
	Action string
	Filter engine.JobPage
	Fields url.Values
	Count  engine.Count
	Max    int
}

// bulkAction retries or cancels the filtered jobs, up to MaxBulk of
// them, after a confirmation that states how many.
func (s *server) bulkAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, err := parseFilter(r.PostForm)
	action := r.PostFormValue("action")
	if err == nil && action != "retry" && action != "cancel" {
		err = fmt.Errorf("action %q: it must be retry or cancel", action)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.Before = 0
	back := "jobs?" + filterQuery(f).Encode()
	if r.PostFormValue("confirm") == "" {
		n, err := s.store.CountJobs(ctx, f, s.opts.MaxBulk)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		fields := filterQuery(f)
		fields.Set("action", action)
		s.render(w, r, "confirm", "Confirm", &confirmData{Action: action, Filter: f, Fields: fields, Count: n, Max: s.opts.MaxBulk})
		return
	}
	ids, err := s.store.JobIDs(ctx, f, s.opts.MaxBulk)
	if err != nil {
		s.back(w, r, back, err.Error(), true)
		return
	}
	// Each job is acted on whatever became of the others (a refusal is
	// one part of the error).
	var moved []engine.Moved
	if action == "retry" {
		moved, err = s.store.RetryJobs(ctx, s.storeClock(), ids)
	} else {
		moved, err = s.store.CancelJobs(ctx, s.storeClock(), ids, "cancelled from the dashboard")
	}
	msg := fmt.Sprintf("%s: %d of %d job(s) done", action, len(moved), len(ids))
	if err != nil {
		var errs []string
		for _, e := range human.Errors(err) {
			if len(errs) == 3 {
				break
			}
			errs = append(errs, e.Error())
		}
		s.back(w, r, back, msg+"; refused: "+strings.Join(errs, "; "), true)
		return
	}
	s.back(w, r, back, msg, false)
}

// queueAction pauses or resumes a queue.
func (s *server) queueAction(w http.ResponseWriter, r *http.Request) {
	q := r.PostFormValue("queue")
	var err error
	switch r.PathValue("action") {
	case "pause":
		err = s.store.PauseQueue(r.Context(), q, s.opts.Now())
	case "resume":
		err = s.store.ResumeQueue(r.Context(), q, s.opts.Now())
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.back(w, r, "", err.Error(), true)
		return
	}
	s.back(w, r, "", fmt.Sprintf("queue %s: %sd", q, r.PathValue("action")), false)
}

// limitAction sets or clears an override, with the checks of `sluice
// limits set` (the store's).
func (s *server) limitAction(w http.ResponseWriter, r *http.Request) {
	target := r.PostFormValue("target")
	switch r.PathValue("action") {
	case "set":
		o, err := parseOverride(r)
		if err == nil {
			err = s.store.SetOverride(r.Context(), o, s.opts.Now())
		}
		if err != nil {
			s.back(w, r, "limits", err.Error(), true)
			return
		}
		s.back(w, r, "limits", fmt.Sprintf("%s: %d per %s, burst %d (workers apply it within seconds)", o.Target, o.To, o.Per, max(o.Burst, 1)), false)
	case "clear":
		if err := s.store.ClearOverride(r.Context(), target); err != nil {
			s.back(w, r, "limits", err.Error(), true)
			return
		}
		s.back(w, r, "limits", target+": the declared limit applies again", false)
	default:
		http.NotFound(w, r)
	}
}

// parseOverride reads an override's form: to and burst are integers,
// per a duration ("1m", "250ms"). An error quotes the start of a bad
// value (keys.Preview), not all of it: the message travels in a URL.
func parseOverride(r *http.Request) (store.Override, error) {
	o := store.Override{Target: r.PostFormValue("target")}
	var err error
	if o.To, err = strconv.Atoi(strings.TrimSpace(r.PostFormValue("to"))); err != nil {
		return o, fmt.Errorf("to: %s is not a whole number", keys.Preview(r.PostFormValue("to")))
	}
	if o.Per, err = time.ParseDuration(strings.TrimSpace(r.PostFormValue("per"))); err != nil {
		return o, fmt.Errorf("per: %s is not a duration such as 1m or 250ms", keys.Preview(r.PostFormValue("per")))
	}
	if b := strings.TrimSpace(r.PostFormValue("burst")); b != "" {
		if o.Burst, err = strconv.Atoi(b); err != nil {
			return o, fmt.Errorf("burst: %s is not a whole number", keys.Preview(b))
		}
	}
	return o, nil
}
