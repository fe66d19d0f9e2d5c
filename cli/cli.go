// Package cli is sluice's command line, importable so that an app's own
// main can offer its workers and dispatcher over its registry:
//
//	func main() {
//		reg := jobs.NewRegistry()
//		jobs.Register(reg, sendEmail)
//		os.Exit(cli.Main(reg))
//	}
//
// and then run `myapp worker` (it works the queues the registry's kinds
// declare; --queues picks others) and `myapp dispatcher`. The same program
// answers the operator's commands:
//
//	worker      claim and run jobs (--http-addr serves /healthz, /readyz, /metrics)
//	dispatcher  promote scheduled jobs, run recurring tasks (--http-addr too)
//	migrate     up [--to V] | down [N] | status | sql --dialect D [--format goose|golang-migrate|atlas --out DIR]
//	stats       jobs per queue and state, budgets, and whether a dispatcher runs
//	jobs        list jobs by state, kind and queue
//	retry, cancel
//	queues      list, pause QUEUE, resume QUEUE
//	budgets     list rate-limit budgets, or clear-idle
//	semaphores  concurrency keys
//	recurring   recurring tasks with their last and next runs
//	limits      rate-limit overrides: list, set, clear
//	processes   live workers and dispatchers
//	check       the app's declarations against the database (E…/W… codes)
//
// Most commands take --json; docs/operations.md documents each shape.
// App's fields carry what flags cannot: the worker's and dispatcher's base
// configuration (hooks, middleware, logger, …), how the store is opened
// (OpenStore, to share the app's own pool) and configured (StoreOptions),
// and the app's own subcommands (Commands).
//
// The database comes from --database-url, else SLUICE_DATABASE_URL, else
// the embedded SQLite file sluice.db; a command that falls back to it says
// so on stderr.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// EnvDatabaseURL names the variable that holds the database URL.
const EnvDatabaseURL = "SLUICE_DATABASE_URL"

// Command is one subcommand.
type Command struct {
	// Name is the word that selects it.
	Name string
	// Summary is its one-line help.
	Summary string
	// Run runs it with the arguments after its name.
	Run func(ctx context.Context, env *Env, args []string) error
}

// App is a command-line program.
type App struct {
	// Name is the program's name in help and errors. Defaults to the
	// base name of os.Args[0].
	Name string
	// Registry holds the app's kinds. With it the app offers `worker`.
	Registry *jobs.Registry
	// Tasks are recurring tasks declared in code; the app's dispatcher
	// runs them (with those of a --config file).
	Tasks []dispatcher.Task
	// Commands are added to the built-in ones (and replace one of the
	// same name).
	Commands []Command
	// Stdout and Stderr default to the process's.
	Stdout, Stderr io.Writer

	// Worker is the worker command's base configuration: what flags
	// cannot say (Hooks, Middleware, Logger, Clock, …) is taken from it as
	// is, and the settings that have flags (Queues, Concurrency,
	// PollInterval, JobTimeout, ShutdownTimeout, HeartbeatInterval,
	// DeadAfter, Horizon, MaxRetryAfter, GiveBackFor, HostClock,
	// ShadowLimits) take it as their defaults, which the command line
	// overrides. Queues defaults to every queue the registry's kinds
	// declare.
	Worker jobs.WorkerConfig
	// Dispatcher is the dispatcher command's base configuration, the same
	// way (Interval, BatchSize, Horizon, HeartbeatInterval and DeadAfter
	// have flags). Its Tasks are run with App.Tasks.
	Dispatcher dispatcher.Config
	// OpenStore opens the store a database URL names. Defaults to
	// store.Open with StoreOptions. An app that shares its own pool
	// returns a store over it here (store.OpenPostgresPool,
	// store.OpenMySQLDB, store.OpenSQLiteDB) and may ignore the URL.
	OpenStore func(ctx context.Context, url string) (*store.Store, error)
	// StoreOptions are the options of the stores commands open with
	// store.Open (store.DeleteOnComplete(), for one). Default none; an
	// OpenStore passes its own.
	StoreOptions []store.Option
	// Metrics turns on --metrics by default for worker and dispatcher:
	// their --http-addr then serves Prometheus metrics at /metrics.
	Metrics bool
	// MetricsRegistry is where sluice's collector is registered and what
	// /metrics serves, so the app's own metrics can be served with it.
	// Defaults to a new registry with the Go and process collectors.
	MetricsRegistry *prometheus.Registry
}

// Env is what a command runs with.
type Env struct {
	// App is the application the command belongs to.
	App *App
	// Stdout is where the command prints its results (App.Stdout, or
	// os.Stdout).
	Stdout io.Writer
	// Stderr is where it prints usage, notices and errors (App.Stderr,
	// or os.Stderr).
	Stderr io.Writer

	// urls are the --database-url values of the command's flag sets, whose
	// passwords its error must not show.
	urls []*string
	// chosen records, per --database-url value, whether the command line
	// or the environment named the database; noticed is set once the
	// command said it fell back to the default.
	chosen   map[*string]*bool
	noticed  bool
	stderrMu sync.Mutex
}

// Main runs the app over reg with the process's arguments and signals, and
// returns the exit code.
func Main(reg *jobs.Registry) int {
	return (&App{Registry: reg}).Main()
}

// Main runs the app with os.Args, cancelling on SIGINT or SIGTERM, and
// returns the exit code.
func (a *App) Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx, os.Args[1:])
}

// usageError is an error in how the program was called: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// Usagef returns an error that exits with code 2, for bad arguments.
func Usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Run runs one command line and returns the exit code: 0 on success, 1 on
// failure, 2 on bad usage. Errors are one line on Stderr.
func (a *App) Run(ctx context.Context, args []string) int {
	env := &Env{App: a, Stdout: a.Stdout, Stderr: a.Stderr}
	if env.Stdout == nil {
		env.Stdout = os.Stdout
	}
	if env.Stderr == nil {
		env.Stderr = os.Stderr
	}
	name := a.name()
	cmds := a.commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" && len(args) == 1 {
		a.usage(env.Stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "help" && len(args) > 1 {
		args = []string{args[1], "--help"}
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			// Not echoed: it may be --database-url=… with a password.
			fmt.Fprintf(env.Stderr, "%s: say the command first, then its flags (run %s help)\n", name, name)
			return 2
		}
		fmt.Fprintf(env.Stderr, "%s: unknown command %q (run %s help)\n", name, dburl.Redact(args[0]), name)
		return 2
	}
	err := cmd.Run(ctx, env, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "%s %s: %s\n", name, cmd.Name, a.ownName(oneLine(env.redact(err))))
		return 2
	default:
		for _, e := range human.Errors(err) {
			fmt.Fprintf(env.Stderr, "%s %s: %s\n", name, cmd.Name, a.ownName(oneLine(env.redact(e))))
		}
		return 1
	}
}

// ownName makes the commands an error suggests (the store's "run `sluice
// migrate up`") name the program that runs.
func (a *App) ownName(msg string) string {
	if name := a.name(); name != "sluice" {
		msg = strings.ReplaceAll(msg, "`sluice ", "`"+name+" ")
	}
	return msg
}

// redact masks, in a command's error, the password of every database URL
// the command was given: whatever opened the database or parsed its URL
// (an app's own command, a driver), the password is not printed.
func (e *Env) redact(err error) error {
	err = dburl.RedactError(err, os.Getenv(EnvDatabaseURL))
	for _, u := range e.urls {
		err = dburl.RedactError(err, *u)
	}
	return err
}

// oneLine prints an error on one line, its control characters escaped
// (human.Text): an error may quote a stored name or a database's message.
func oneLine(err error) string {
	return human.Text(strings.Join(strings.Fields(err.Error()), " "))
}

func (a *App) name() string {
	if a.Name != "" {
		return a.Name
	}
	if len(os.Args) > 0 && os.Args[0] != "" {
		return filepath.Base(os.Args[0])
	}
	return "sluice"
}

func (a *App) commands() map[string]Command {
	out := map[string]Command{}
	for _, c := range builtins() {
		out[c.Name] = c
	}
	if a.Registry == nil {
		delete(out, "worker")
	}
	for _, c := range a.Commands {
		out[c.Name] = c
	}
	return out
}

func (a *App) usage(w io.Writer, cmds map[string]Command) {
	fmt.Fprintf(w, "usage: %s COMMAND [flags]\n\ncommands:\n", a.name())
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, cmds[n].Summary)
	}
	fmt.Fprintf(w, "\nThe database is --database-url, else $%s, else %s.\nRun %s COMMAND -h for a command's flags.\n", EnvDatabaseURL, dburl.Default, a.name())
}

func builtins() []Command {
	return []Command{
		{Name: "worker", Summary: "claim and run jobs", Run: runWorker},
		{Name: "dispatcher", Summary: "promote scheduled jobs and keep rate-limited ones moving", Run: runDispatcher},
		{Name: "migrate", Summary: "migrate up|down [N]|status, or write the SQL for your own tool (migrate sql)", Run: runMigrate},
		{Name: "stats", Summary: "jobs per queue and state", Run: runStats},
		{Name: "jobs", Summary: "list jobs, filtered by state, kind and queue", Run: runJobs},
		{Name: "retry", Summary: "run failed, cancelled, scheduled or parked jobs again now (not blocked ones: they wait for a concurrency slot): retry ID...", Run: runRetry},
		{Name: "cancel", Summary: "discard jobs that are not running: cancel ID...", Run: runCancel},
		{Name: "queues", Summary: "list queues, or pause|resume QUEUE", Run: runQueues},
		{Name: "budgets", Summary: "list rate-limit budgets, or clear-idle", Run: runBudgets},
		{Name: "semaphores", Summary: "list concurrency keys: slots free and taken, jobs blocked", Run: runSemaphores},
		{Name: "recurring", Summary: "list recurring tasks with their last and next runs", Run: runRecurring},
		{Name: "limits", Summary: "list rate-limit overrides, or set|clear one without a restart", Run: runLimits},
		{Name: "explain", Summary: "say why a job is not running and when it should start: explain ID", Run: runExplain},
		{Name: "ui", Summary: "serve the web dashboard: ui --addr 127.0.0.1:8080", Run: runUI},
		{Name: "check", Summary: "check the app's limits against the database (codes E…, W…)", Run: runCheck},
		{Name: "processes", Summary: "list live workers and dispatchers: queues, heartbeat, jobs running", Run: runProcesses},
	}
}

// FlagSet returns a flag set for a command that writes its help to the
// env's stderr and carries --database-url. The URL's password is masked
// wherever the flag set prints it (its default, from $SLUICE_DATABASE_URL,
// in the help), and in the command's error. A flag error prints the usage
// once; the error itself is the command's to print (Run does).
func (e *Env) FlagSet(name, usage string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(e.App.name()+" "+name, flag.ContinueOnError)
	// The flag package prints a flag error and then the usage: the error
	// is left to Run, which prints it once, with the program's name.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fs.SetOutput(e.Stderr)
		defer fs.SetOutput(io.Discard)
		fmt.Fprintf(e.Stderr, "usage: %s %s\n", e.App.name(), usage)
		fs.PrintDefaults()
	}
	url := os.Getenv(EnvDatabaseURL)
	named := url != ""
	if url == "" {
		url = dburl.Default
	}
	fs.Var(urlValue{&url, &named}, "database-url", "database `URL`: postgres://…, mysql://… or sqlite:PATH (env "+EnvDatabaseURL+")")
	e.urls = append(e.urls, &url)
	if e.chosen == nil {
		e.chosen = map[*string]*bool{}
	}
	e.chosen[&url] = &named
	return fs, &url
}

// Defaulted reports whether url, a --database-url value of one of the
// env's flag sets, is the default because neither the command line nor
// the environment named a database.
func (e *Env) Defaulted(url *string) bool {
	named, ok := e.chosen[url]
	return ok && !*named
}

// Open opens the store at *url, a --database-url value of one of the
// env's flag sets, through the app's OpenStore (or store.Open with StoreOptions). When
// the URL is the default (no flag, no environment) it says so on stderr,
// once per command. With checked it also refuses a database whose schema
// is not current, and, as such a database cannot be one just created, a
// SQLite file that does not exist, naming its path, instead of creating
// an empty one (without checked the file is created, for migrate up).
func (e *Env) Open(ctx context.Context, url *string, checked bool) (*store.Store, error) {
	return e.openStore(ctx, url, checked, !checked)
}

// sqliteMemory is the name SQLite gives a database that lives in memory,
// with the connection that opened it.
const sqliteMemory = ":memory:"

// openStore is Open; create says whether a SQLite file that does not
// exist may be created: only by the commands that write a schema to it.
// A command that reads (stats, check, migrate status, …) refuses it,
// naming the path, rather than leave an empty database behind; and it
// refuses an in-memory database (:memory:), which is new and empty
// each time, saying so.
func (e *Env) openStore(ctx context.Context, url *string, checked, create bool) (*store.Store, error) {
	// An app's OpenStore may ignore the URL (a shared pool): the default
	// is then nothing to announce, and no file of it to look for.
	if e.Defaulted(url) && !e.noticed && e.App.OpenStore == nil {
		e.noticed = true
		e.Notef("no --database-url or $%s given: using the default database %s", EnvDatabaseURL, DescribeURL(*url))
	}
	if path, ok := dburl.SQLitePath(*url); ok && !create && e.App.OpenStore == nil {
		if path == sqliteMemory {
			return nil, fmt.Errorf("no database at %s: an in-memory SQLite database is new and empty each time a command opens it, with no schema and no jobs (name a database file or server with --database-url)", *url)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s: the file does not exist (create it with `%s migrate up`, or name an existing database with --database-url)", DescribeURL(*url), e.App.name())
		}
	}
	open := e.App.OpenStore
	if open == nil {
		open = func(ctx context.Context, url string) (*store.Store, error) {
			return store.Open(ctx, url, e.App.StoreOptions...)
		}
	}
	s, err := open(ctx, *url)
	if err != nil {
		return nil, err
	}
	if checked {
		if err := s.CheckSchema(ctx); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Notef prints one line to stderr, after the program's name, its control
// characters escaped (human.Text).
func (e *Env) Notef(format string, args ...any) {
	e.stderrMu.Lock()
	defer e.stderrMu.Unlock()
	fmt.Fprintf(e.Stderr, "%s: %s\n", e.App.name(), human.Text(fmt.Sprintf(format, args...)))
}

// DescribeURL names a database for people: the URL with its password
// masked, and for SQLite the file's absolute path.
func DescribeURL(url string) string {
	out := dburl.Redact(url)
	if path, ok := dburl.SQLitePath(url); ok {
		if abs, err := filepath.Abs(path); err == nil && abs != path {
			out += " (" + abs + ")"
		}
	}
	return out
}

// urlValue is the --database-url flag: a string that prints with its
// password masked, and records that it was set.
type urlValue struct {
	s   *string
	set *bool
}

func (v urlValue) String() string {
	if v.s == nil {
		return ""
	}
	return dburl.Redact(*v.s)
}

func (v urlValue) Set(s string) error {
	*v.s = s
	if v.set != nil {
		*v.set = true
	}
	return nil
}

// Parse parses args, flags and positional arguments in any order (so
// `queues pause mail --database-url …` works), turning flag errors into
// usage errors. The positional arguments are left in fs.Args().
func Parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			positional = append(positional, args[1:]...)
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}

// parseVerb parses the args of a command that takes a verb (`budgets
// clear-idle`), with its flags anywhere: before the verb (`budgets --json
// list`), between it and its arguments, or after them. The verb is the
// first positional argument, def when there is none; it returns the verb
// and the positional arguments after it. A verb not in verbs is bad usage
// naming them, before anything is opened; "help" prints the usage, as -h
// does.
func parseVerb(fs *flag.FlagSet, args []string, def string, verbs ...string) (string, []string, error) {
	if err := Parse(fs, args); err != nil {
		return "", nil, err
	}
	verb, rest := def, fs.Args()
	if len(rest) > 0 {
		verb, rest = rest[0], rest[1:]
	}
	if verb == "help" && !slices.Contains(verbs, verb) {
		fs.Usage()
		return "", nil, flag.ErrHelp
	}
	if !slices.Contains(verbs, verb) {
		command := fs.Name()
		if i := strings.LastIndexByte(command, ' '); i >= 0 {
			command = command[i+1:]
		}
		return "", nil, Usagef("unknown %s action %q: use %s", command, verb, orList(verbs))
	}
	return verb, rest, nil
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// open parses a command's args, refusing more than positional arguments
// besides its flags and whatever a check refuses (before it connects),
// and opens the migrated store its --database-url names; the caller closes
// it.
func (e *Env) open(ctx context.Context, fs *flag.FlagSet, url *string, args []string, positional int, checks ...func() error) (*engine.Store, error) {
	if err := Parse(fs, args); err != nil {
		return nil, err
	}
	if err := noMoreArgs(fs, positional); err != nil {
		return nil, err
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return e.openEngine(ctx, url, true)
}

// noMoreArgs refuses more than n positional arguments, naming them.
func noMoreArgs(fs *flag.FlagSet, n int) error {
	if fs.NArg() <= n {
		return nil
	}
	// The flag set is named "PROGRAM COMMAND"; the error is printed after
	// the program's name already, so it names the command alone, as the
	// verbs' errors do ("sluice check: check takes no arguments").
	name := fs.Name()
	if _, cmd, ok := strings.Cut(name, " "); ok {
		name = cmd
	}
	if n == 0 {
		return Usagef("%s takes no arguments, got %q", name, strings.Join(fs.Args(), " "))
	}
	return Usagef("%s takes %d argument(s), got %q", name, n, strings.Join(fs.Args(), " "))
}

// openEngine is Open for the commands that read and change the database
// through sluice's engine.
func (e *Env) openEngine(ctx context.Context, url *string, checked bool) (*engine.Store, error) {
	s, err := e.Open(ctx, url, checked)
	if err != nil {
		return nil, err
	}
	return engine.From(s), nil
}

// Open opens the store at url.
func Open(ctx context.Context, url string) (*store.Store, error) {
	return store.Open(ctx, url)
}
