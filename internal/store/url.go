package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Opening a store by URL. A store URL names where the backups are, the
// way restic and litestream name a repository:
//
//	<scheme>://<bucket>[/<prefix>][?endpoint=URL&region=R&ca-file=PATH]
//
// The scheme is a kind a backend registered (Register): "cos" and "s3"
// (internal/store/cos), "mem" (internal/store/memstore, tests). The host
// is the bucket, the path the key prefix inside it, and the query holds
// the neutral settings of Config that say where the service is. Every
// program opens a store through one path: the CLI's older flags (--bucket,
// --cos-endpoint, ...) are written as the same URL first.
//
// Credentials never go in a URL: a URL lands in shell history, process
// listings, logs and manifests. A URL with user info, or with a query
// parameter that looks like a credential, is refused, and the error does
// not repeat its value. Credentials come from Config.CredentialsDir, the
// environment or Config.FallbackCredentials, as for any Config.

// Query parameters of a store URL, each one a field of Config.
const (
	ParamEndpoint = "endpoint" // Config.Endpoint
	ParamRegion   = "region"   // Config.Region
	ParamCAFile   = "ca-file"  // Config.CAFile
)

// params are the query parameters ParseURL accepts, sorted.
var params = []string{ParamCAFile, ParamEndpoint, ParamRegion}

// secretWords are parts of a query parameter's name that mark it as a
// credential ("secret_access_key", "apikey", "token", "X-Amz-Signature").
var secretWords = []string{"secret", "key", "token", "password", "passwd", "credential", "signature", "auth", "session"}

// redacted stands for a value ParseURL's errors do not repeat.
const redacted = "REDACTED"

// ErrCredentialsInURL is the error of a store URL that carries a
// credential (user info, or a query parameter named like one).
var ErrCredentialsInURL = errors.New("credentials never go in a store URL: they come from the credentials directory, the environment or the namespace's secret")

// ParseURL parses a store URL into the Config it names: Kind (the scheme,
// which must be registered), Bucket (the host), Prefix (the path, without
// its leading slash) and the query's settings. Only the location is set;
// the caller adds the rest (credentials' sources, retries, timeouts).
// Its errors never repeat a credential the URL held.
func ParseURL(raw string) (Config, error) {
	if strings.TrimSpace(raw) == "" {
		return Config{}, errors.New("store URL: empty: want <scheme>://<bucket>[/<prefix>][?endpoint=...&region=...]")
	}
	// An '@' before the query is user info (a credential), however
	// net/url would read it: refused before parsing, so that no parse
	// error (which quotes the input) can repeat part of it. No bucket or
	// prefix can hold an '@'.
	if head, _, _ := strings.Cut(raw, "?"); strings.Contains(head, "@") {
		return Config{}, fmt.Errorf("store URL %q: user info: %w", schemeOnly(raw), ErrCredentialsInURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error, and the error it wraps, quote the input: say only
		// that it does not parse.
		return Config{}, fmt.Errorf("store URL %q: not a URL (want <scheme>://<bucket>[/<prefix>][?endpoint=...&region=...])", schemeOnly(raw))
	}
	shown := RedactURL(raw)
	if u.User != nil {
		return Config{}, fmt.Errorf("store URL %q: user info: %w", shown, ErrCredentialsInURL)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("store URL %q: bad query (want name=value pairs joined by &, percent-encoded)", schemeOnly(raw))
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if secretParam(k) {
			return Config{}, fmt.Errorf("store URL %q: parameter %q: %w", shown, k, ErrCredentialsInURL)
		}
	}
	if u.Scheme == "" || u.Opaque != "" {
		return Config{}, fmt.Errorf("store URL %q: want <scheme>://<bucket>[/<prefix>] (schemes: %s)", shown, strings.Join(Kinds(), ", "))
	}
	kind := strings.ToLower(u.Scheme)
	if !registered(kind) {
		return Config{}, fmt.Errorf("store URL %q: unknown scheme %q (known: %s)", shown, kind, strings.Join(Kinds(), ", "))
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return Config{}, fmt.Errorf("store URL %q: a fragment is not allowed", shown)
	}
	if u.Port() != "" {
		return Config{}, fmt.Errorf("store URL %q: the host is the bucket, it has no port (the service's URL is endpoint=)", shown)
	}
	cfg := Config{Kind: kind, Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	for k, vs := range q {
		if len(vs) != 1 {
			return Config{}, fmt.Errorf("store URL %q: parameter %q given %d times", shown, k, len(vs))
		}
		switch k {
		case ParamEndpoint:
			// Checked (and refused with user info, redacted) where
			// every endpoint is: the CLI's and the backend's check.
			cfg.Endpoint = vs[0]
		case ParamRegion:
			cfg.Region = vs[0]
		case ParamCAFile:
			cfg.CAFile = vs[0]
		default:
			return Config{}, fmt.Errorf("store URL %q: unknown parameter %q (known: %s)", shown, k, strings.Join(params, ", "))
		}
	}
	return cfg, nil
}

// URL is the store URL of cfg's location (ParseURL's inverse): its kind,
// bucket, prefix, endpoint, region and CA file. Nothing else of Config is
// in it, credentials least of all.
func (c Config) URL() string {
	q := url.Values{}
	for _, p := range []struct{ k, v string }{{ParamEndpoint, c.Endpoint}, {ParamRegion, c.Region}, {ParamCAFile, c.CAFile}} {
		if p.v != "" {
			q.Set(p.k, p.v)
		}
	}
	u := url.URL{Scheme: c.Kind, Host: c.Bucket, RawQuery: q.Encode()}
	if c.Prefix != "" {
		u.Path = "/" + c.Prefix
	}
	return u.String()
}

// OpenURL opens the store raw names (ParseURL) with the rest of settings:
// the credentials' sources, retries and timeouts. The location fields of
// settings (Kind, Bucket, Prefix, Endpoint, Region, CAFile) must be empty:
// the URL holds them, and two sources of one setting would be a guess.
func OpenURL(ctx context.Context, raw string, settings Config) (Store, error) {
	cfg, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if settings.Kind != "" || settings.Bucket != "" || settings.Prefix != "" || settings.Endpoint != "" || settings.Region != "" || settings.CAFile != "" {
		return nil, errors.New("store.OpenURL: the settings name a location too; the URL holds it")
	}
	settings.Kind, settings.Bucket, settings.Prefix = cfg.Kind, cfg.Bucket, cfg.Prefix
	settings.Endpoint, settings.Region, settings.CAFile = cfg.Endpoint, cfg.Region, cfg.CAFile
	return Open(ctx, settings)
}

// secretParam reports whether a query parameter's name looks like a
// credential's.
func secretParam(name string) bool {
	if slices.Contains(params, name) {
		return false
	}
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactURL is raw with its user info and the values of its credential-
// like query parameters replaced, for errors and logs. Of a value that
// does not parse as a URL only the scheme is kept: where a credential
// would sit in it cannot be told.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if scheme, _, ok := strings.Cut(raw, "://"); ok && !strings.ContainsAny(scheme, "@?/:") {
			return scheme + "://…"
		}
		return "…"
	}
	if u.Opaque != "" {
		// scheme:opaque ("cos:ak:sk@b"): no part of it is known to be
		// free of a credential.
		return u.Scheme + ":…"
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redacted
		} else {
			for k, vs := range q {
				switch k {
				case ParamRegion, ParamCAFile:
				case ParamEndpoint:
					for i, v := range vs {
						vs[i] = redactUserInfo(v)
					}
				default:
					// Unknown parameters are refused; their values
					// are not shown ("sig", "sk" name no word of
					// secretWords and may still be one).
					q[k] = []string{redacted}
				}
			}
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// schemeOnly is raw's scheme and "://…": for an error about a URL whose
// text may hold a credential anywhere.
func schemeOnly(raw string) string {
	if scheme, _, ok := strings.Cut(raw, "://"); ok && scheme != "" && !strings.ContainsAny(scheme, "@?/:#") {
		return scheme + "://…"
	}
	return "…"
}

// redactUserInfo is an endpoint URL with its user info replaced.
func redactUserInfo(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		if strings.Contains(v, "@") {
			return redacted
		}
		return v
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	return u.String()
}

// registered reports whether a backend registered kind.
func registered(kind string) bool {
	registryMu.RLock()
	defer registryMu.RUnlock()
	_, ok := registry[kind]
	return ok
}
