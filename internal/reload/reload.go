// Package reload re-reads a running daemon's configuration: on SIGHUP
// ([Reloader.Run]), on POST /reload on the admin listener ([Reloader] is
// its http.Handler) and through `switchboard reload` ([RunVerb], which
// posts there).
//
// A reload loads the configuration file again. A configuration with any
// problem is refused whole: every problem is logged (and returned to
// POST /reload and `switchboard reload`), and the running configuration
// stays. A valid one is compared with the running one section by
// section: the sections the daemon can change live are handed to the
// apply function (the daemon's: bindings, agents' heartbeats, access,
// the channels' allow_users), which says what it applied and what it
// keeps; every other section that changed (listeners, data_dir, bus,
// memory, channels, ...) is reported "kept until restart" and nothing of
// it changes. A live key may be nested (channels.telegram.allow_users):
// its section is then compared key by key, and its other keys that
// changed are reported kept one by one (channels.telegram.token).
package reload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"

	"github.com/switchboard-chat/switchboard/config"
)

// Result is what a reload came to.
type Result struct {
	// Changes are the lines of what was applied and what is kept until
	// restart (none: the file holds the running configuration).
	Changes []string
	// Err is the refusal of an invalid configuration (every problem).
	Err error
}

// String is the result as `switchboard reload` prints it.
func (r Result) String() string {
	var b strings.Builder
	switch {
	case r.Err != nil:
		b.WriteString("configuration refused; the running one stays:\n")
		for _, p := range config.Problems(r.Err) {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	case len(r.Changes) == 0:
		b.WriteString("configuration reloaded: no changes\n")
	default:
		b.WriteString("configuration reloaded:\n")
		for _, c := range r.Changes {
			fmt.Fprintf(&b, "  %s\n", c)
		}
	}
	return b.String()
}

// Reloader reloads a configuration of type C (a struct of YAML sections).
// Safe for concurrent use: reloads run one at a time.
type Reloader[C any] struct {
	mu      sync.Mutex
	running C
	load    func() (C, error)
	apply   func(next C) []string
	live    map[string]bool
	log     *slog.Logger
}

// New returns a reloader of running: load reads the configuration again,
// apply puts a valid one's live sections in force and describes the
// changes; live names the keys apply handles, top-level (bindings) or
// nested (channels.telegram.allow_users); the others are kept until
// restart when they change. A nil log discards.
func New[C any](running C, load func() (C, error), apply func(next C) []string, log *slog.Logger, live ...string) *Reloader[C] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader[C]{running: running, load: load, apply: apply, live: map[string]bool{}, log: log}
	for _, k := range live {
		r.live[k] = true
	}
	return r
}

// Reload loads the configuration again and applies it, or refuses it.
func (r *Reloader[C]) Reload() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := r.load()
	if err != nil {
		problems := config.Problems(err)
		if len(problems) == 0 {
			problems = []error{err}
		}
		for _, p := range problems {
			r.log.Error("configuration reload refused; the running configuration stays", "problem", p.Error())
		}
		return Result{Err: errors.Join(problems...)}
	}
	changes := r.apply(next)
	for _, key := range changedIn(reflect.ValueOf(r.running), reflect.ValueOf(next), "", r.live) {
		if !r.live[key] {
			changes = append(changes, key+": changed, kept until restart")
		}
	}
	r.log.Info("configuration reloaded", "changes", len(changes))
	for _, c := range changes {
		r.log.Info("configuration reload: " + c)
	}
	return Result{Changes: changes}
}

// changedIn lists the keys of the structs a and b (under prefix) whose
// values differ. A key some live key lies under ("channels" for
// "channels.telegram.allow_users") is compared field by field, so that
// the live key itself is left to apply and its siblings are reported on
// their own (channels.telegram.token, channels.slack).
func changedIn(a, b reflect.Value, prefix string, live map[string]bool) []string {
	a, b = reflect.Indirect(a), reflect.Indirect(b)
	if a.Kind() != reflect.Struct || b.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key := prefix + name
		fa, fb := a.Field(i), b.Field(i)
		if reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			continue
		}
		if under(live, key) && fa.Kind() == fb.Kind() && !(fa.Kind() == reflect.Pointer && (fa.IsNil() || fb.IsNil())) {
			out = append(out, changedIn(fa, fb, key+".", live)...)
			continue
		}
		out = append(out, key)
	}
	return out
}

// under reports whether some live key is below key.
func under(live map[string]bool, key string) bool {
	for k := range live {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// ServeHTTP is POST /reload: 200 with the changes, or 422 with every
// problem of a refused configuration.
func (r *Reloader[C]) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	res := r.Reload()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if res.Err != nil {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}
	_, _ = io.WriteString(w, res.String())
}

// Run reloads on every SIGHUP until ctx ends, then returns nil.
func (r *Reloader[C]) Run(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			r.log.Info("SIGHUP: reloading the configuration")
			r.Reload()
		}
	}
}
