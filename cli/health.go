package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/sluicequeue/sluice/internal/human"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/metrics"
	"github.com/sluicequeue/sluice/store"
)

// serving are a process's --http-addr and --metrics.
type serving struct {
	addr      *string
	metricsOn *bool
	// gatherer is what /metrics serves, once metrics are on.
	gatherer prometheus.Gatherer
}

// serveFlags adds --http-addr and --metrics to fs.
func serveFlags(fs *flag.FlagSet, metricsOn bool) *serving {
	return &serving{
		addr: fs.String("http-addr", "", "serve /healthz, /readyz and (with --metrics) /metrics on this address, e.g. :8080 (default: no server)"),
		metricsOn: fs.Bool("metrics", metricsOn,
			"serve Prometheus metrics at /metrics on --http-addr"),
	}
}

// metrics returns sluice's collector over s, registered where /metrics
// will serve it, when --metrics is on; nil otherwise.
func (sv *serving) metrics(env *Env, s *store.Store, log *slog.Logger) (*metrics.Metrics, error) {
	if !*sv.metricsOn {
		return nil, nil
	}
	if *sv.addr == "" {
		return nil, Usagef("--metrics needs --http-addr to serve them on")
	}
	reg := env.App.MetricsRegistry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := metrics.New(s, metrics.Config{Logger: log})
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register sluice's metrics: %w", err)
	}
	sv.gatherer = reg
	return m, nil
}

// health is what /readyz checks: the process's own row in
// sluice_processes (pid returns its id), stamped on clock every interval.
type health struct {
	store    *engine.Store
	pid      func() int64
	clock    engine.Clock
	interval time.Duration
}

// readyTimeout bounds the database reads of one /readyz.
const readyTimeout = 5 * time.Second

// check is one of /readyz's checks.
type check struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ready runs /readyz's checks: the database answers, its schema is
// current, and this process's heartbeat is fresh (younger than two
// heartbeat intervals, and not reaped as dead).
func (h health) ready(ctx context.Context) []check {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	db := check{Name: "database", OK: true}
	schema := check{Name: "schema", OK: true}
	beat := check{Name: "heartbeat", OK: true}
	fail := func(c *check, format string, args ...any) { c.OK, c.Error = false, fmt.Sprintf(format, args...) }
	st, err := h.store.MigrationStatus(ctx)
	if err != nil {
		fail(&db, "%v", err)
		fail(&schema, "not checked: the database did not answer")
		fail(&beat, "not checked: the database did not answer")
		return []check{db, schema, beat}
	}
	if pending := engine.Pending(st); len(pending) > 0 {
		fail(&schema, "pending migrations: %s", strings.Join(pending, ", "))
	}
	id := h.pid()
	if id == 0 {
		fail(&beat, "not registered yet")
		return []check{db, schema, beat}
	}
	procs, err := h.store.Processes(ctx, h.clock)
	if err != nil {
		fail(&beat, "%v", err)
		return []check{db, schema, beat}
	}
	found := false
	for _, p := range procs {
		if p.ID != id {
			continue
		}
		found = true
		if p.Age > 2*h.interval {
			fail(&beat, "the last heartbeat was %s ago (every %s expected)", human.Duration(p.Age), h.interval)
		}
	}
	if !found {
		fail(&beat, "process %d is not registered (presumed dead and reaped; it registers again at its next heartbeat)", id)
	}
	return []check{db, schema, beat}
}

// handler serves /healthz, /readyz and, when metrics are on, /metrics.
func (sv *serving) handler(h health) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		checks := h.ready(r.Context())
		status, code := "ok", http.StatusOK
		for _, c := range checks {
			if !c.OK {
				status, code = "unavailable", http.StatusServiceUnavailable
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": checks})
	})
	if sv.gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(sv.gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

// run runs the process (a worker's or dispatcher's Run) and, with
// --http-addr, the health server beside it until the process returns.
// The address is bound before the process starts, so a bad one fails at
// once.
func (sv *serving) run(ctx context.Context, env *Env, s *store.Store, log *slog.Logger, h health, process func(context.Context) error) error {
	if *sv.addr == "" {
		return process(ctx)
	}
	ln, err := net.Listen("tcp", *sv.addr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	h.store = engine.From(s)
	srv := &http.Server{Handler: sv.handler(h), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	paths := "/healthz, /readyz"
	if sv.gatherer != nil {
		paths += ", /metrics"
	}
	log.Info("sluice: serving health checks", "addr", ln.Addr().String(), "paths", paths)
	err = process(ctx)
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("health server: %w", serr)
	}
	return err
}
