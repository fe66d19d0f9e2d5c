package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/jobs"
)

type jobListData struct {
	Filter engine.JobPage
	States []engine.State
	Jobs   []*engine.JobInfo
	Pages  pager
	Count  engine.Count
	Bad    string
}

// parseFilter reads a job filter from a query or form; a bad value gives
// an error that names it. A kind, queue or budget key that no job could
// have (see keys.Check) is a bad value.
func parseFilter(v url.Values) (engine.JobPage, error) {
	f := engine.JobPage{Kind: v.Get("kind"), Queue: v.Get("queue"), WaitKey: v.Get("budget")}
	if st := v.Get("state"); st != "" {
		parsed, err := engine.ParseState(st)
		if err != nil {
			return f, fmt.Errorf("state: %w", err)
		}
		f.State = parsed
	}
	if b := v.Get("before"); b != "" {
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id < 1 {
			return f, fmt.Errorf("before: %q is not a job id", b)
		}
		f.Before = id
	}
	for _, c := range []struct{ name, v string }{{"kind", f.Kind}, {"queue", f.Queue}, {"budget", f.WaitKey}} {
		// A value no job can hold (a NUL, which PostgreSQL refuses in
		// text; bytes that are not UTF-8; more than a key holds) is bad
		// input, by the rule every stored name and key follows.
		if c.v != "" {
			if err := keys.Check(c.name, c.v); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

func filterQuery(f engine.JobPage) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": string(f.State), "kind": f.Kind, "queue": f.Queue, "budget": f.WaitKey} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// idParam is a job id as a page's parameter: "" for none (0).
func idParam(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

func (s *server) jobList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := &jobListData{States: engine.States}
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		d.Bad = err.Error()
		s.render(w, r, "jobs", "Jobs", d)
		return
	}
	d.Filter = f
	js, next, err := s.store.PageJobs(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Jobs = js
	d.Pages = newPager(r, "jobs", filterQuery(f), "before", idParam(f.Before), idParam(next), "newest", "older")
	if d.Count, err = s.store.CountJobs(ctx, f, maxCount); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "jobs", "Jobs", d)
}

type jobDetailData struct {
	Job         *engine.JobInfo
	Args        string
	Calls       []string
	Attempts    []engine.Attempt
	Explanation *jobs.Explanation
	Lines       []string
	CanRetry    bool
	CanCancel   bool
}

// retryable and cancellable are the states the store's RetryJobs and
// CancelJobs accept.
var (
	retryable   = []engine.State{engine.StateFailed, engine.StateCancelled, engine.StateScheduled, engine.StateParked, engine.StateReady}
	cancellable = []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked, engine.StateFailed}
)

func (s *server) jobDetail(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.fail(w, r, fmt.Errorf("%q is not a job id: %w", r.PathValue("id"), engine.ErrNotFound))
		return
	}
	// The job's row and its explanation come from one snapshot, so the
	// facts table and "Why it waits" agree (its state, the slot it holds);
	// its calls and failed attempts are read after, apart: a job that
	// fails meanwhile may list one attempt more than its count.
	e, j, err := jobs.ExplainJob(ctx, s.pub, s.reg, id, s.opts.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &jobDetailData{Job: j, Args: prettyJSON(j.Args), Explanation: e, Lines: e.Lines()}
	calls, err := s.store.JobCalls(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, c := range calls {
		d.Calls = append(d.Calls, prettyJSON(c))
	}
	if d.Attempts, err = s.store.Attempts(ctx, id); err != nil {
		s.fail(w, r, err)
		return
	}
	for _, st := range retryable {
		d.CanRetry = d.CanRetry || j.State == st
	}
	for _, st := range cancellable {
		d.CanCancel = d.CanCancel || j.State == st
	}
	s.render(w, r, "job", fmt.Sprintf("Job %d", id), d)
}

// prettyJSON indents JSON, or returns the text as it is when it is not
// JSON.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return unescapeHTML(out.String())
}

// unescapeHTML turns JSON's \u003c, \u003e and \u0026 (which Go's encoder
// writes for <, > and &) back into the characters, so args read as they
// were given; the page escapes them for HTML. An escape preceded by an
// escaped backslash is text and is kept.
func unescapeHTML(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			if r, ok := map[string]byte{"u003c": '<', "u003e": '>', "u0026": '&'}[s[i+1:min(i+6, len(s))]]; ok {
				b.WriteByte(r)
				i += 5
				continue
			}
			b.WriteString(s[i : i+2])
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
