package engine

import "errors"

// ErrNotificationsUnheard is the error a Listener returns when its
// connection listens but hears nothing: a notification it sent itself,
// through the pool, did not arrive. A pooler in transaction mode
// (PgBouncer's pool_mode = transaction) does that: it hands the LISTEN to
// whichever server connection is free and drops the notifications that
// connection receives later. The store does not listen again (another
// LISTEN would only reach another pooled connection): workers poll.
var ErrNotificationsUnheard = errors.New("notifications unheard")
