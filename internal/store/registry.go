package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Opening a store by kind (the registry). A backend registers a Factory
// under its kind, which is also its URL scheme (url.go), from an init
// function of its own (register.go in its package); a program links the
// backends it wants with a blank import (internal/store/all links the
// production ones) and opens a store with OpenURL (or Open, from a
// Config). Nothing but the backend and that import names a backend:
// callers see a URL, Config and Store.

// Defaults of the neutral Config, shared by every backend that has the
// setting (and shown by the CLI's flags).
const (
	// DefaultStallTimeout is Config.StallTimeout's default: a call that
	// moves no byte for this long is aborted with ErrStalled.
	DefaultStallTimeout = 60 * time.Second
	// DefaultMinThroughput is Config.MinThroughput's default: 64 KiB in
	// any 60 s a call waits on the store.
	DefaultMinThroughput = "64KiB/60s"
)

// Config opens a store (Open): the kind, which picks the backend, and the
// settings a remote object store takes, whatever its API. A backend
// ignores what it has no use for and refuses (with an error naming the
// setting) what it cannot honour.
//
// Credentials are never in Config as text from argv: the backend reads
// them from CredentialsDir (a mounted secret) or the environment (Getenv),
// and only when neither holds any, from FallbackCredentials.
type Config struct {
	Kind     string // the backend: "cos", "s3", "mem", ... (Kinds lists those linked in); a URL's scheme
	Endpoint string // the service's URL (https://host[:port]; http:// only for local test servers)
	Region   string // region or location constraint ("": the backend's default)
	Bucket   string // the bucket (or container) holding the backups; a URL's host
	CAFile   string // an extra CA bundle for the endpoint; the system roots are trusted too
	// Prefix is the key prefix inside the bucket (a URL's path). Backends
	// ignore it: the caller lays its keys out under it (catalog.Layout).
	Prefix string

	// CredentialsDir is a mounted credentials secret ("": none).
	CredentialsDir string
	// Getenv reads the environment (os.Getenv; nil: an empty
	// environment).
	Getenv func(string) string
	// FallbackCredentials, when set, supplies the credentials when neither
	// CredentialsDir nor the environment holds any (e.g. a Kubernetes
	// secret read through the API): the secret's files, which the backend
	// parses as it parses a mounted CredentialsDir. Its error is returned
	// by Open as it is.
	FallbackCredentials func(ctx context.Context) (*SecretFiles, error)

	// MaxRetries is the retries per request on transient errors (0: none;
	// negative: the backend's default).
	MaxRetries int
	// StallTimeout aborts a call that makes no progress for this long
	// (ErrStalled); 0: DefaultStallTimeout.
	StallTimeout time.Duration
	// MinThroughput is "<size>/<window>" (e.g. "64KiB/60s") or "off": a
	// call that moves less in any window of its waiting is stalled too;
	// "": DefaultMinThroughput.
	MinThroughput string
}

// Factory builds a store of one kind from cfg. It does not need to
// contact the store (Checker does that); it validates cfg.
type Factory func(ctx context.Context, cfg Config) (Store, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a backend available to Open under kind. It panics when
// kind is empty, f is nil or kind is already registered: registration is
// wiring, done once from an init function.
func Register(kind string, f Factory) {
	if kind == "" || f == nil {
		panic("store: Register with an empty kind or a nil factory")
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[kind]; dup {
		panic(fmt.Sprintf("store: Register called twice for kind %q", kind))
	}
	registry[kind] = f
}

// Kinds are the registered kinds, sorted.
func Kinds() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	kinds := make([]string, 0, len(registry))
	for k := range registry {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Open builds the store cfg.Kind names. An unknown kind is an error naming
// it and the known kinds.
func Open(ctx context.Context, cfg Config) (Store, error) {
	registryMu.RLock()
	f, ok := registry[cfg.Kind]
	registryMu.RUnlock()
	if !ok {
		known := Kinds()
		if len(known) == 0 {
			return nil, fmt.Errorf("store: unknown kind %q: no backend is linked into this program", cfg.Kind)
		}
		return nil, fmt.Errorf("store: unknown kind %q (known: %s)", cfg.Kind, strings.Join(known, ", "))
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	return f(ctx, cfg)
}

// SecretFiles is a credentials secret read from somewhere other than a
// mounted directory (the Kubernetes API): each key a file name, each value
// its content. Backends parse it as they parse Config.CredentialsDir, so
// the caller never needs to know the backend's credentials type.
type SecretFiles struct {
	Source string            // where it came from, for logs and errors: "secret NS/NAME"
	Files  map[string][]byte // key → content
}
