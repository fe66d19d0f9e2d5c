// Command traced-http shows one trace that joins an HTTP request and the
// job it enqueued: the handler enqueues inside the request's span, the
// enqueue's producer span writes the W3C trace context into the job's
// metadata, and the worker's run continues the trace (otelsluice with
// ChildOf), with the job's deferrals on the span when a rate limit held it.
//
// The program serves two sign-ups on a local server; the welcome email is
// limited to one every 300 ms, so the second job waits for its slot, and
// its span says so. It prints each request's trace as a tree.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SendWelcome emails a new user.
type SendWelcome struct {
	Email string `json:"email"`
}

// Kind names the job type.
func (SendWelcome) Kind() string { return "send_welcome" }

// run serves n sign-ups, works their jobs, and returns every span ended.
func run(ctx context.Context, s *store.Store, n int, logs io.Writer) ([]sdktrace.ReadOnlySpan, error) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	o, err := otelsluice.New(otelsluice.Config{TracerProvider: tp, ChildOf: true})
	if err != nil {
		return nil, err
	}

	done := make(chan struct{}, n)
	reg := jobs.NewRegistry()
	err = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWelcome]) error {
		// The run's logger carries the job and the trace.
		jobs.Logger(ctx).Info("sending welcome email", "email", j.Args.Email)
		done <- struct{}{}
		return nil
	}, jobs.Queue("mail"), jobs.RateLimit(ratelimit.Limit[SendWelcome]{To: 1, Per: 300 * time.Millisecond, Burst: 1, Key: "smtp"}))
	if err != nil {
		return nil, err
	}
	client := jobs.NewClient(s, reg, o.InstrumentClient(jobs.ClientConfig{}))

	// The HTTP side: a server span per request (what otelhttp would make),
	// and the enqueue inside it.
	tracer := tp.Tracer("signup-server")
	prop := propagation.TraceContext{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, "POST /signup", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if _, err := client.Enqueue(ctx, SendWelcome{Email: r.FormValue("email")}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	for i := range n {
		resp, err := http.PostForm(srv.URL, map[string][]string{"email": {fmt.Sprintf("user%d@example.com", i+1)}})
		if err != nil {
			return nil, err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return nil, fmt.Errorf("sign-up %d: %s", i+1, resp.Status)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := jobs.NewWorker(s, reg, o.InstrumentWorker(jobs.WorkerConfig{
		Queues: []string{"mail"}, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}))
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(runCtx) }()
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			stop()
			wg.Wait()
			return nil, ctx.Err()
		}
	}
	stop()
	wg.Wait()
	return spans.Ended(), nil
}

// render prints each trace as a tree of its spans, in start order, with
// the attributes that tell a job's story.
func render(spans []sdktrace.ReadOnlySpan) string {
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&b, "%s%s (%s)", strings.Repeat("  ", depth+1), s.Name(), s.SpanKind())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case otelsluice.DeferralsKey, otelsluice.OutcomeKey, otelsluice.AttemptKey, otelsluice.DeferralReasonKey:
				fmt.Fprintf(&b, " %s=%q", kv.Key, kv.Value.String())
			case otelsluice.LimitWaitKey:
				if w := kv.Value.AsFloat64(); w > 0 {
					fmt.Fprintf(&b, " %s=%.1fs", kv.Key, w)
				}
			}
		}
		b.WriteString("\n")
		for _, c := range children[s.SpanContext().SpanID()] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		id := r.SpanContext().TraceID()
		n := 0
		for _, s := range spans {
			if s.SpanContext().TraceID() == id {
				n++
			}
		}
		fmt.Fprintf(&b, "trace %s: %d spans\n", id, n)
		walk(r, 0)
	}
	return b.String()
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	var logs strings.Builder
	spans, err := run(ctx, s, 2, &logs)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(render(spans))
	fmt.Println("\nthe handler's log lines:")
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "welcome") {
			fmt.Println(" ", l)
		}
	}
}
