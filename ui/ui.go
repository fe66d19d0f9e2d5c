// Package ui is sluice's web dashboard: the queues, the jobs, why a job
// waits, the rate-limit budgets and whether they hold their promise,
// concurrency keys, recurring tasks and limit overrides, with the
// operator's actions (retry, cancel, pause and resume a queue, set and
// clear an override).
//
// Mount it in the app's own server, under any path, behind the app's own
// authentication:
//
//	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", ui.Handler(s, reg, ui.Options{})))
//
// or run it alone with `sluice ui --addr 127.0.0.1:8080`. Pages are
// rendered on the server (html/template, assets embedded); a small
// script refreshes their figures while the tab is visible. Actions are
// POSTs that carry a CSRF token; Options.ReadOnly hides and refuses them.
// Replicas behind a load balancer share Options.Secret, which signs the
// token (use New, which says when the secret will not do):
//
//	dash, err := ui.New(s, reg, ui.Options{Secret: secret}) // the same 32 or more bytes on every replica
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Options configures the dashboard. The zero value is usable.
type Options struct {
	// ReadOnly hides every action and refuses their POSTs with 403.
	// Defaults to false.
	ReadOnly bool
	// Tasks lists the recurring tasks for the Recurring page, typically
	// a dispatcher's Tasks method. Defaults to nil: the page says none
	// are known to the dashboard.
	Tasks func(context.Context) ([]dispatcher.TaskInfo, error)
	// Now is the dashboard's clock. Defaults to time.Now.
	Now func() time.Time
	// Refresh is how often a visible page refreshes its figures.
	// Defaults to 5s; a negative value turns refreshing off.
	Refresh time.Duration
	// Logger receives errors that pages show as a failure. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// MaxBulk caps how many jobs one bulk retry or cancel applies to.
	// Defaults to 1000.
	MaxBulk int
	// Secret signs the CSRF token of every action's form and the
	// message a page shows after an action. Give every replica of the
	// dashboard (and every restart of it) the same value: at least
	// MinSecretBytes random bytes, kept as a password is. A page one
	// replica rendered can then post its actions to another, and the
	// message the redirect carries verifies there. New refuses a shorter
	// one, an empty one included; the handler keeps a copy.
	//
	// Defaults to nil: a random secret made when the handler is built, so
	// a page's forms and messages hold only for the handler that served
	// it. Behind a load balancer without sticky sessions, or after a
	// restart, an action posted from a page another handler rendered is
	// refused (403, "missing or wrong CSRF token") and its message is not
	// shown.
	Secret []byte
}

// MinSecretBytes is the shortest Options.Secret New accepts: 32 bytes,
// the size of the SHA-256 MAC it keys.
const MinSecretBytes = 32

// server is one dashboard.
type server struct {
	store *engine.Store
	pub   *store.Store
	reg   *jobs.Registry
	opts  Options
	pages map[string]*template.Template
	// csrf is the secret that signs the CSRF token and the messages:
	// a copy of Options.Secret, or random.
	csrf []byte
}

// Handler is New for options known to be good: it panics where New
// returns an error (a nil store, a Secret shorter than MinSecretBytes).
// Use New where the secret comes from configuration.
func Handler(s *store.Store, reg *jobs.Registry, opts Options) http.Handler {
	h, err := New(s, reg, opts)
	if err != nil {
		panic(err)
	}
	return h
}

// New returns the dashboard over s, describing limits as reg declares
// them (reg may be nil: limits are then shown as the budgets were last
// charged). It refuses a nil store and an Options.Secret shorter than
// MinSecretBytes, saying how long the secret is (never what it holds).
// It panics if its embedded templates do not parse, which a test catches.
func New(s *store.Store, reg *jobs.Registry, opts Options) (http.Handler, error) {
	if s == nil {
		return nil, errors.New("ui: the store is nil")
	}
	if opts.Secret != nil && len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("ui: Options.Secret is %d bytes; it must be at least %d random bytes, the same on every replica (or nil: a random one for this handler alone)", len(opts.Secret), MinSecretBytes)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Refresh == 0 {
		opts.Refresh = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBulk <= 0 {
		opts.MaxBulk = 1000
	}
	if reg == nil {
		reg = jobs.NewRegistry()
	}
	srv := &server{store: engine.From(s), pub: s, reg: reg, opts: opts, pages: parsePages(), csrf: bytes.Clone(opts.Secret)}
	srv.opts.Secret = nil // the server signs with its own copy, csrf
	if srv.csrf == nil {
		srv.csrf = make([]byte, MinSecretBytes)
		if _, err := rand.Read(srv.csrf); err != nil {
			return nil, fmt.Errorf("ui: a random secret: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", srv.overview)
	mux.HandleFunc("GET /jobs", srv.jobList)
	mux.HandleFunc("GET /jobs/{id}", srv.jobDetail)
	mux.HandleFunc("GET /budgets", srv.budgetList)
	mux.HandleFunc("GET /budget", srv.budgetDetail)
	mux.HandleFunc("GET /concurrency", srv.concurrency)
	mux.HandleFunc("GET /recurring", srv.recurring)
	mux.HandleFunc("GET /limits", srv.limits)
	sub, _ := fs.Sub(assetFS, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(sub)))
	mux.HandleFunc("POST /jobs/{id}/{action}", srv.action(srv.jobAction))
	mux.HandleFunc("POST /jobs/bulk", srv.action(srv.bulkAction))
	mux.HandleFunc("POST /queues/{action}", srv.action(srv.queueAction))
	mux.HandleFunc("POST /limits/{action}", srv.action(srv.limitAction))
	return secureHeaders(mux), nil
}

// secureHeaders sets headers every response carries: no framing, no
// sniffing, and a content policy that runs only the dashboard's own
// script and style.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// base is the relative path from the page requested back to the
// dashboard's root, so that links work under any mount path.
func base(r *http.Request) string {
	// The escaped path: an escaped slash (%2F) is part of a segment, as
	// the browser resolving the links sees it.
	n := strings.Count(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if n == 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

// page is what every template receives.
type page struct {
	Title    string
	Nav      string
	Base     string
	CSRF     string
	ReadOnly bool
	Refresh  int64 // milliseconds; 0 is off
	Now      time.Time
	Flash    string
	Error    string
	Data     any
}

func (s *server) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	p := page{Title: title, Nav: name, Base: base(r), CSRF: s.token(), ReadOnly: s.opts.ReadOnly, Now: s.opts.Now(), Data: data}
	p.Flash, p.Error = s.message(r)
	if s.opts.Refresh > 0 {
		p.Refresh = s.opts.Refresh.Milliseconds()
	}
	t := s.pages[name]
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		s.fail(w, r, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Bytes that are not UTF-8 (a database that stored them as given)
	// show as U+FFFD: the page stays valid UTF-8 whatever the data.
	_, _ = w.Write([]byte(strings.ToValidUTF8(buf.String(), "\uFFFD")))
}

// fail answers with an error page. A job that does not exist is a 404, a
// name or key that none could be (keys.ErrInvalid) a 400; anything else a
// 500 whose text is the error's, escaped.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, engine.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, keys.ErrInvalid):
		code = http.StatusBadRequest
	default:
		s.opts.Logger.ErrorContext(r.Context(), "dashboard", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = s.pages["error"].ExecuteTemplate(w, "layout", page{Title: http.StatusText(code), Nav: "error", Base: base(r), Now: s.opts.Now(), Error: err.Error()})
}
