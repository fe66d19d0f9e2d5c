package cli

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
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

// EnvUISecret names the variable that holds the dashboard's secret
// (ui.Options.Secret) in hex: at least 64 hex digits (32 bytes), the same
// on every replica, as `openssl rand -hex 32` prints. --secret-file names
// a file that holds it instead. Unset, each process makes its own, and a
// form one replica rendered is refused by another.
const EnvUISecret = "SLUICE_UI_SECRET"

func runUI(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("ui", "ui [--addr HOST:PORT] [--basic-auth USER:PASS] [--secret-file FILE] [--read-only] [--config FILE] [flags]")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on; loopback unless --basic-auth or --insecure-no-auth")
	auth := fs.String("basic-auth", "", "require HTTP basic auth as USER:PASS (env "+EnvUIBasicAuth+")")
	insecure := fs.Bool("insecure-no-auth", false, "listen on a non-loopback address without auth (behind a proxy that authenticates)")
	secretFile := fs.String("secret-file", "", "read the secret that signs the forms, in hex, from `FILE`: the same on every replica (env "+EnvUISecret+" holds it instead)")
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
	secret, err := uiSecret(*secretFile)
	if err != nil {
		return err
	}
	if *refresh == 0 {
		*refresh = -1
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	opts := ui.Options{ReadOnly: *readOnly, Refresh: *refresh, Secret: secret}
	d, err := env.dispatcher(s, *config, dispatcher.Config{}, true)
	if err != nil {
		return err
	}
	opts.Tasks = d.Tasks
	h, err := ui.New(s, env.App.Registry, opts)
	if err != nil {
		return err
	}
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

// uiSecret reads the dashboard's secret, in hex, from the file named
// (--secret-file) or from $SLUICE_UI_SECRET; nil when neither is given.
// A secret that is not hex, is shorter than ui.MinSecretBytes, or is set
// but empty is bad usage, named by where it came from; no error shows
// any of it.
func uiSecret(file string) ([]byte, error) {
	text, fromEnv := os.LookupEnv(EnvUISecret)
	from := "$" + EnvUISecret
	switch {
	case file != "" && strings.TrimSpace(text) != "":
		return nil, Usagef("give the secret once: --secret-file or $%s, not both", EnvUISecret)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, Usagef("--secret-file: %v", err)
		}
		text, from = string(b), "--secret-file "+file
	case !fromEnv:
		return nil, nil
	}
	// Set but empty, the variable is refused (a deployment that meant to
	// fill it in would otherwise run on a secret of its own per process),
	// unless --secret-file gives the secret.
	text = strings.TrimSpace(text)
	if text == "" {
		if file != "" {
			return nil, Usagef("%s is empty: it must hold the secret in hex, as `openssl rand -hex 32` prints", from)
		}
		return nil, Usagef("%s is set but empty: give the secret or unset the variable", from)
	}
	if i := strings.IndexFunc(text, func(r rune) bool { return !strings.ContainsRune("0123456789abcdefABCDEF", r) }); i >= 0 {
		return nil, Usagef("%s is not hex: character %d is not a hex digit (give at least %d hex digits, as `openssl rand -hex %d` prints)", from, i+1, 2*ui.MinSecretBytes, ui.MinSecretBytes)
	}
	if len(text)%2 != 0 {
		return nil, Usagef("%s has an odd number of hex digits (%d): two make a byte", from, len(text))
	}
	if len(text) < 2*ui.MinSecretBytes {
		return nil, Usagef("%s is %d bytes (%d hex digits); it must be at least %d bytes (%d hex digits), as `openssl rand -hex %d` prints", from, len(text)/2, len(text), ui.MinSecretBytes, 2*ui.MinSecretBytes, ui.MinSecretBytes)
	}
	b, err := hex.DecodeString(text)
	if err != nil {
		return nil, Usagef("%s is not hex", from) // not reached: checked above
	}
	return b, nil
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
