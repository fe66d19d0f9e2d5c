package engine

// The public package store wraps a *Store for applications, so that none
// of the engine is part of sluice's API. sluice's own packages (jobs,
// dispatcher, metrics, cli) reach the engine behind a *store.Store with
// From, and tests wrap an engine they built in a *store.Store with Public;
// package store installs both when it is initialised (a program that holds
// a *store.Store has imported it).
var (
	unwrap func(any) *Store
	wrap   func(*Store) any
)

// Install tells From and Public how to unwrap and wrap a *store.Store;
// package store calls it from its init function.
func Install(from func(any) *Store, public func(*Store) any) { unwrap, wrap = from, public }

// From returns the engine behind s, a *store.Store; nil for a nil s.
func From(s any) *Store {
	if s == nil || unwrap == nil {
		return nil
	}
	return unwrap(s)
}

// Public returns a *store.Store (as any) around e.
func Public(e *Store) any {
	if wrap == nil {
		panic("engine.Public: package store is not linked")
	}
	return wrap(e)
}
