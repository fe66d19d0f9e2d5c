package otelsluice

import (
	"context"

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
			opt := o.runOpt(e.Queue, e.Kind, e.Outcome)
			ctx := context.Background()
			o.finished.Add(ctx, 1, opt)
			o.duration.Record(ctx, e.Duration.Seconds(), opt)
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

// runKey identifies the attribute set of a run's measurements.
type runKey struct {
	queue, kind string
	outcome     jobs.Outcome
}

// runOpt returns the attributes of a run's measurements (without an
// outcome when it is empty), made once per queue, kind and outcome: a
// set costs more to build than the measurement.
func (o *Integration) runOpt(queue, kind string, outcome jobs.Outcome) metric.MeasurementOption {
	k := runKey{queue, kind, outcome}
	if v, ok := o.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	more := []attribute.KeyValue{KindKey.String(kind)}
	if outcome != "" {
		more = append(more, OutcomeKey.String(string(outcome)))
	}
	v, _ := o.sets.LoadOrStore(k, metricOpt(commonAttrs(queue), more...))
	return v.(metric.MeasurementOption)
}

// metricOpt joins attribute lists into one measurement option.
func metricOpt(base []attribute.KeyValue, more ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), more...)...))
}
