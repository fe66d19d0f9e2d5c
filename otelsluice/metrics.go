package otelsluice

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Hooks returns the worker hooks that record the metrics of runs and
// deferrals: sluice.jobs.finished and sluice.job.duration by queue, kind
// and outcome, and sluice.jobs.deferred by kind and limit (and budget key,
// with BudgetKeyAttribute). Join them to the worker's own hooks
// (InstrumentWorker does).
func (o *Integration) Hooks() jobs.Hooks {
	return jobs.Hooks{
		OnFinish: func(e jobs.FinishEvent) {
			s := o.seriesOf(e.Queue, e.Kind).outcome(e.Outcome)
			s.finished.Add(1)
			o.duration.Record(context.Background(), e.Duration.Seconds(), s.opt...)
		},
		OnDefer: func(e jobs.DeferEvent) {
			ctx := context.Background()
			base := []attribute.KeyValue{semconv.MessagingSystemKey.String(System), KindKey.String(e.Kind)}
			if e.Shadow {
				base = append(base, ShadowKey.Bool(true))
			}
			if o.cfg.BudgetKeyAttribute {
				for key, n := range e.PerKey {
					o.deferred.Add(ctx, int64(n), metricOpt(base, LimitKey.String(ratelimit.ScopeOf(key)), BudgetKey.String(key)))
				}
				return
			}
			for limit, n := range e.PerLimit {
				o.deferred.Add(ctx, int64(n), metricOpt(base, LimitKey.String(limit)))
			}
		},
	}
}

// seriesKey identifies the runs of one kind in one queue.
type seriesKey struct{ queue, kind string }

// series is what the runs of one kind in one queue share, made once: a
// measurement's attribute set costs more to build than the measurement,
// and a run's span attributes that never change are copied, not built.
type series struct {
	// latency measures sluice.job.latency: the queue and the kind. (A
	// measurement's options are kept as the slice Record takes, which
	// passing them spread does not copy to the heap.)
	latency []metric.RecordOption
	// spanName and spanAttrs are the run span's name and its attributes
	// that depend on the queue and the kind only.
	spanName  string
	spanAttrs []attribute.KeyValue
	// known are the outcomes jobs reports, in outcomes' order; other holds
	// any other (an Outcome added to jobs later), made on first use.
	known [len(outcomes)]outcomeSeries
	other sync.Map // jobs.Outcome → *outcomeSeries
	queue string
	kind  string
}

// outcomes are the outcomes whose series a series makes up front.
var outcomes = [...]jobs.Outcome{jobs.OutcomeCompleted, jobs.OutcomeRetried, jobs.OutcomeFailed,
	jobs.OutcomeCancelled, jobs.OutcomeSnoozed, jobs.OutcomeThrottled, jobs.OutcomeReleased}

// outcomeSeries is one queue, kind and outcome's: the attributes of
// sluice.job.duration and sluice.jobs.finished, and the count of runs the
// finished counter reports when the meter collects it (an observable
// counter: counting is one atomic add, and the SDK's per-measurement work
// is done once per collection instead of once per run).
type outcomeSeries struct {
	set      attribute.Set
	opt      []metric.RecordOption
	finished atomic.Int64
}

func newOutcomeSeries(s *outcomeSeries, queue, kind string, outcome jobs.Outcome) {
	s.set = attribute.NewSet(semconv.MessagingSystemKey.String(System), semconv.MessagingDestinationName(queue),
		KindKey.String(kind), OutcomeKey.String(string(outcome)))
	s.opt = []metric.RecordOption{metric.WithAttributeSet(s.set)}
}

// outcome returns the series of outcome.
func (s *series) outcome(outcome jobs.Outcome) *outcomeSeries {
	for i, known := range outcomes {
		if known == outcome {
			return &s.known[i]
		}
	}
	if v, ok := s.other.Load(outcome); ok {
		return v.(*outcomeSeries)
	}
	fresh := new(outcomeSeries)
	newOutcomeSeries(fresh, s.queue, s.kind, outcome)
	v, _ := s.other.LoadOrStore(outcome, fresh)
	return v.(*outcomeSeries)
}

// seriesOf returns the series of kind in queue, making it on first use.
// Reads take no lock: the map is replaced, never changed, when a series
// is added.
func (o *Integration) seriesOf(queue, kind string) *series {
	k := seriesKey{queue, kind}
	if s, ok := (*o.series.Load())[k]; ok {
		return s
	}
	o.seriesMu.Lock()
	defer o.seriesMu.Unlock()
	old := *o.series.Load()
	if s, ok := old[k]; ok {
		return s
	}
	s := &series{queue: queue, kind: kind, spanName: "process " + queue}
	s.latency = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
		semconv.MessagingSystemKey.String(System), semconv.MessagingDestinationName(queue), KindKey.String(kind)))}
	s.spanAttrs = []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingDestinationName(queue),
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		KindKey.String(kind),
	}
	for i, outcome := range outcomes {
		newOutcomeSeries(&s.known[i], queue, kind, outcome)
	}
	m := maps.Clone(old)
	m[k] = s
	o.series.Store(&m)
	return s
}

// observeFinished reports every series' count of finished runs to the
// meter; a series with no run is left out, as a counter never added to
// is.
func (o *Integration) observeFinished(_ context.Context, obs metric.Int64Observer) error {
	report := func(s *outcomeSeries) {
		if n := s.finished.Load(); n > 0 {
			obs.Observe(n, metric.WithAttributeSet(s.set))
		}
	}
	for _, s := range *o.series.Load() {
		for i := range s.known {
			report(&s.known[i])
		}
		s.other.Range(func(_, v any) bool {
			report(v.(*outcomeSeries))
			return true
		})
	}
	return nil
}

// metricOpt joins attribute lists into one measurement option.
func metricOpt(base []attribute.KeyValue, more ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), more...)...))
}
