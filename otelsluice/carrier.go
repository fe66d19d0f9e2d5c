package otelsluice

import (
	"slices"

	"github.com/sluicequeue/sluice/jobs"
)

// writeCarrier is a propagation.TextMapCarrier that writes into the
// metadata of an enqueued job.
type writeCarrier struct{ job *jobs.EnqueueJob }

func (c writeCarrier) Get(key string) string { return c.job.Metadata[key] }
func (c writeCarrier) Set(key, value string) { c.job.SetMetadata(key, value) }
func (c writeCarrier) Keys() []string        { return keysOf(c.job.Metadata) }

// readCarrier is a propagation.TextMapCarrier over a running job's
// metadata; it never writes.
type readCarrier map[string]string

func (c readCarrier) Get(key string) string { return c[key] }
func (c readCarrier) Set(string, string)    {}
func (c readCarrier) Keys() []string        { return keysOf(c) }

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
