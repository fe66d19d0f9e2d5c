package engine

import "sync"

// discardHub holds the functions WatchDiscards registered.
type discardHub struct {
	mu      sync.Mutex
	watches []func(kind string)
}

// WatchDiscards registers fn to be called once per job a promotion of this
// store discards, with the job's kind, after the promotion commits: a job
// whose concurrency limit says Discard, that waited scheduled (delayed,
// or enqueued into a paused queue) and found no slot of its key free when
// it came due. A discard an enqueue makes itself is the enqueue's to
// report (the client's OnEnqueue); these come later, in the process whose
// dispatcher (or drain) promotes the job. fn runs on the promoting
// goroutine and must not block. A watcher lasts as long as the store.
func (s *Store) WatchDiscards(fn func(kind string)) {
	h := &s.discards
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watches = append(h.watches, fn)
}

// report calls the watchers once per kind in kinds (one per discarded
// job); nothing without discards.
func (h *discardHub) report(kinds []string) {
	if len(kinds) == 0 {
		return
	}
	h.mu.Lock()
	watches := h.watches
	h.mu.Unlock()
	for _, fn := range watches {
		for _, k := range kinds {
			fn(k)
		}
	}
}
