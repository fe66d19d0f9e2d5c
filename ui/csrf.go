package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
)

// The CSRF token is a MAC of a fixed label under the dashboard's secret
// (Options.Secret, or a random one per handler): a page of the dashboard
// carries it in each action's form, and a page of another site cannot
// read it (the same-origin policy), so it cannot post an action.
// Cross-origin POSTs are refused first, by the browser's Sec-Fetch-Site
// and Origin headers. Handlers given the same secret (replicas) make the
// same token, and verify each other's signed messages.

func (s *server) mac(label, msg string) string {
	m := hmac.New(sha256.New, s.csrf)
	m.Write([]byte(label))
	m.Write([]byte{0})
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// token is the CSRF token every form carries.
func (s *server) token() string { return s.mac("csrf", "") }

var crossOrigin = http.NewCrossOriginProtection()

// action wraps an action's handler: refused in read-only mode, refused
// cross-origin, refused without the CSRF token.
func (s *server) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.ReadOnly {
			http.Error(w, "the dashboard is read-only", http.StatusForbidden)
			return
		}
		if err := crossOrigin.Check(r); err != nil {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.token())) {
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// back redirects to a page of the dashboard (a path relative to its
// root, with its query) with a message. The message is signed, so that a
// link from elsewhere cannot make a page show text of its choosing.
func (s *server) back(w http.ResponseWriter, r *http.Request, to string, msg string, failed bool) {
	u, err := url.Parse(to)
	if err != nil || u.IsAbs() || u.Host != "" {
		u = &url.URL{}
	}
	q := u.Query()
	key := "flash"
	if failed {
		key = "error"
	}
	q.Set(key, msg)
	q.Set("sig", s.mac(key, msg))
	u.RawQuery = q.Encode()
	// A relative Location, which the browser resolves against the URL it
	// asked for: http.Redirect would resolve it against r.URL, which lost
	// the mount path to http.StripPrefix.
	w.Header().Set("Location", base(r)+u.String())
	w.WriteHeader(http.StatusSeeOther)
}

// message returns the signed message a redirect carried, if any.
func (s *server) message(r *http.Request) (flash, failure string) {
	q := r.URL.Query()
	sig := q.Get("sig")
	if f := q.Get("flash"); f != "" && hmac.Equal([]byte(sig), []byte(s.mac("flash", f))) {
		flash = f
	}
	if e := q.Get("error"); e != "" && hmac.Equal([]byte(sig), []byte(s.mac("error", e))) {
		failure = e
	}
	return flash, failure
}
