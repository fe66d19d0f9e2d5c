// Package metrics exposes sluice's Prometheus metrics. Nothing is exported
// unless the app asks:
//
//	m := metrics.New(store, metrics.Config{})
//	prometheus.MustRegister(m)
//	client := jobs.NewClient(store, reg, jobs.ClientConfig{OnEnqueue: m.OnEnqueue})
//	worker, _ := jobs.NewWorker(store, reg, jobs.WorkerConfig{Hooks: m.Hooks()})
//
// Counters come from the client's and the worker's hooks, and, for the
// jobs a promotion discards (a job with a concurrency limit that says
// Discard, which waited scheduled and found no slot free when it came
// due), from the store: those a dispatcher or a drain of this process
// discards on the same store count with the enqueues' discards. The queue
// depth and the age of the oldest waiting job are read from the database
// at each scrape.
package metrics

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// Config configures the metrics. The zero value is usable.
type Config struct {
	// Namespace prefixes every metric. Defaults to "sluice".
	Namespace string
	// ScrapeTimeout bounds the database reads of one scrape. Defaults to
	// 5s.
	ScrapeTimeout time.Duration
	// Clock is what job ages are measured against. Defaults to the system
	// clock.
	Clock clock.Clock
	// Logger receives scrape errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Metrics is a prometheus.Collector of sluice's metrics.
type Metrics struct {
	cfg   Config
	store *engine.Store
	clock clock.Clock
	log   *slog.Logger

	enqueued   *prometheus.CounterVec
	coalesced  *prometheus.CounterVec
	blocked    *prometheus.CounterVec
	claimed    prometheus.Counter
	claimTime  prometheus.Histogram
	finished   *prometheus.CounterVec
	deferred   *prometheus.CounterVec
	wouldDefer *prometheus.CounterVec

	depth  *prometheus.Desc
	oldest *prometheus.Desc
}

// New returns the metrics of the jobs in s. It watches s for the jobs its
// promotions discard, for as long as s lives.
func New(pub *store.Store, cfg Config) *Metrics {
	s := engine.From(pub)
	if cfg.Namespace == "" {
		cfg.Namespace = "sluice"
	}
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ns := cfg.Namespace
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		cfg: cfg, store: s, clock: clock.OrSystem(cfg.Clock), log: log,
		enqueued:  counter("jobs_enqueued_total", "Jobs enqueued, by kind and by what became of them: created, joined (coalesced into a pending job), blocked (no concurrency slot) or discarded (no concurrency slot, under Discard: at the enqueue, or when a job that waited scheduled came due, which counted created too).", "kind", "result"),
		coalesced: counter("jobs_coalesced_total", "Enqueues that joined a pending job instead of adding one, by kind.", "kind"),
		blocked:   counter("jobs_blocked_total", "Jobs blocked at enqueue because their concurrency key had no slot free, by kind.", "kind"),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "jobs_claimed_total",
			Help: "Jobs claimed by workers."}),
		claimTime: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "claim_duration_seconds",
			Help: "How long a claim's transaction took.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		finished:   counter("jobs_finished_total", "Runs that ended, by kind and outcome: completed, retried, failed, cancelled, snoozed, throttled or released (at shutdown, while the handler still ran: counted once, at the release).", "kind", "outcome"),
		deferred:   counter("jobs_deferred_total", "Jobs a rate limit sent back to wait, by a claim or by a worker's sweep of a flood, by kind and by the limit (group or kind) that held them.", "kind", "limit"),
		wouldDefer: counter("jobs_would_defer_total", "Jobs a rate limit in shadow mode would have deferred and let run, by kind and limit.", "kind", "limit"),
		depth: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "jobs"),
			"Jobs that are not completed or cancelled, by queue and state.", []string{"queue", "state"}, nil),
		oldest: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "oldest_waiting_job_age_seconds"),
			"Age of the oldest job waiting to run, by queue, split by whether a limit holds it (throttled: waiting on a rate limit or a concurrency slot). Alert on throttled=\"false\": a throttled backlog is a limit working.",
			[]string{"queue", "throttled"}, nil),
	}
	s.WatchDiscards(m.onDiscard)
	return m
}

// onDiscard counts a job a promotion discarded for want of a concurrency
// slot: it was counted created at its enqueue, and now discarded too.
func (m *Metrics) onDiscard(kind string) {
	m.enqueued.WithLabelValues(kind, "discarded").Inc()
}

// OnEnqueue counts an enqueue; pass it as jobs.ClientConfig.OnEnqueue.
func (m *Metrics) OnEnqueue(e jobs.EnqueueEvent) {
	result := "created"
	switch {
	case e.Joined:
		result = "joined"
		m.coalesced.WithLabelValues(e.Kind).Inc()
	case e.State == engine.StateBlocked:
		result = "blocked"
		m.blocked.WithLabelValues(e.Kind).Inc()
	case e.State == engine.StateCancelled:
		result = "discarded"
	}
	m.enqueued.WithLabelValues(e.Kind, result).Inc()
}

// Hooks returns the worker hooks that count claims, deferrals and
// outcomes; pass them as jobs.WorkerConfig.Hooks (or Join them with yours).
func (m *Metrics) Hooks() jobs.Hooks {
	return jobs.Hooks{
		OnClaim: func(e jobs.ClaimEvent) {
			m.claimed.Add(float64(e.Claimed))
			m.claimTime.Observe(e.Duration.Seconds())
		},
		OnDefer: func(e jobs.DeferEvent) {
			c := m.deferred
			if e.Shadow {
				c = m.wouldDefer
			}
			for limit, n := range e.PerLimit {
				c.WithLabelValues(e.Kind, limit).Add(float64(n))
			}
		},
		OnFinish: func(e jobs.FinishEvent) {
			m.finished.WithLabelValues(e.Kind, string(e.Outcome)).Inc()
		},
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.enqueued, m.coalesced, m.blocked, m.claimed, m.claimTime, m.finished, m.deferred, m.wouldDefer}
}

// Describe sends every metric's description.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.depth
	ch <- m.oldest
}

// Collect sends the counters and reads the queue depth and the oldest
// waiting jobs from the database.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ScrapeTimeout)
	defer cancel()
	depth, err := m.store.Depth(ctx)
	if err != nil {
		m.log.Warn("sluice: metrics: read queue depth", "err", err)
		ch <- prometheus.NewInvalidMetric(m.depth, err)
	}
	for _, q := range depth {
		for _, state := range engine.States {
			if state == engine.StateCompleted || state == engine.StateCancelled {
				continue
			}
			ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(q.Counts[state]), q.Queue, string(state))
		}
	}
	oldest, err := m.store.OldestWaiting(ctx)
	if err != nil {
		m.log.Warn("sluice: metrics: read oldest waiting jobs", "err", err)
		ch <- prometheus.NewInvalidMetric(m.oldest, err)
	}
	now := m.clock.Now()
	for _, o := range oldest {
		ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, max(now.Sub(o.Since).Seconds(), 0),
			o.Queue, strconv.FormatBool(o.Throttled))
	}
}
