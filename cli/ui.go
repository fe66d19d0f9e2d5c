package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/ui"
)

// EnvUIBasicAuth names the variable that holds the dashboard's
// user:password when --basic-auth is not given.
const EnvUIBasicAuth = "SLUICE_UI_BASIC_AUTH"

func runUI(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("ui", "ui [--addr HOST:PORT] [--basic-auth USER:PASS] [--read-only] [--config FILE] [flags]")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on; loopback unless --basic-auth or --insecure-no-auth")
	auth := fs.String("basic-auth", "", "require HTTP basic auth as USER:PASS (env "+EnvUIBasicAuth+")")
	insecure := fs.Bool("insecure-no-auth", false, "listen on a non-loopback address without auth (behind a proxy that authenticates)")
	readOnly := fs.Bool("read-only", false, "hide and refuse every action")
	refresh := fs.Duration("refresh", 5*time.Second, "how often a visible page refreshes its figures (0: never)")
	config := configFlag(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("ui takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	if *auth == "" {
		*auth = os.Getenv(EnvUIBasicAuth)
	}
	user, pass, hasAuth := strings.Cut(*auth, ":")
	if *auth != "" && (!hasAuth || user == "" || pass == "") {
		return Usagef("--basic-auth must be USER:PASS with both set")
	}
	loopback, err := isLoopback(*addr)
	if err != nil {
		return Usagef("--addr: %v", err)
	}
	if !loopback && *auth == "" && !*insecure {
		return Usagef("--addr %s is not a loopback address: give --basic-auth USER:PASS (or $%s), or --insecure-no-auth when a proxy in front authenticates", *addr, EnvUIBasicAuth)
	}
	if *refresh == 0 {
		*refresh = -1
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	opts := ui.Options{ReadOnly: *readOnly, Refresh: *refresh}
	d, err := env.dispatcher(s, *config, dispatcher.Config{}, true)
	if err != nil {
		return err
	}
	opts.Tasks = d.Tasks
	var h http.Handler = ui.Handler(s, env.App.Registry, opts)
	if *auth != "" {
		h = basicAuth(h, user, pass)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.Stdout, "dashboard on http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// isLoopback reports whether addr's host is a loopback address or
// "localhost". An empty host listens on every interface, so it is not.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// basicAuth requires user and pass, compared in constant time.
func basicAuth(h http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		okUser := subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1
		okPass := subtle.ConstantTimeCompare([]byte(p), []byte(pass)) == 1
		if !ok || !okUser || !okPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="sluice", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
