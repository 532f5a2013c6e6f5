package cos_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
)

// The neutral defaults are the backend's.
func TestNeutralDefaults(t *testing.T) {
	if cos.DefaultMinThroughput.String() != store.DefaultMinThroughput {
		t.Errorf("cos.DefaultMinThroughput %s, store.DefaultMinThroughput %s", cos.DefaultMinThroughput, store.DefaultMinThroughput)
	}
	if cos.DefaultStallTimeout != store.DefaultStallTimeout {
		t.Errorf("cos.DefaultStallTimeout %v, store.DefaultStallTimeout %v", cos.DefaultStallTimeout, store.DefaultStallTimeout)
	}
}

// store.Open builds a COS store from the neutral Config: credentials from
// the environment, else the fallback (whose error comes back as it is).
func TestOpenCOS(t *testing.T) {
	ctx := context.Background()
	env := map[string]string{cos.EnvAccessKeyID: "AK", cos.EnvSecretAccessKey: "SK"}
	cfg := store.Config{Kind: cos.Kind, Endpoint: "http://127.0.0.1:1", Bucket: "b", Getenv: func(k string) string { return env[k] },
		MaxRetries: 0, MinThroughput: "off"}
	called := false
	cfg.FallbackCredentials = func(context.Context) (*store.SecretFiles, error) { called = true; return nil, errors.New("not used") }
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*cos.Store); !ok || called {
		t.Errorf("Open: %T (fallback called: %v), want a *cos.Store from the environment's credentials", st, called)
	}

	cfg.Getenv = nil
	secret := errors.New("reading the secret failed")
	cfg.FallbackCredentials = func(context.Context) (*store.SecretFiles, error) { return nil, secret }
	if _, err := store.Open(ctx, cfg); err != secret {
		t.Errorf("Open with a failing fallback: %v, want its error as it is", err)
	}
	cfg.FallbackCredentials = func(context.Context) (*store.SecretFiles, error) {
		return &store.SecretFiles{Source: "secret ns/cos", Files: map[string][]byte{
			"access_key_id": []byte("AK"), "secret_access_key": []byte("SK"), "../escape": []byte("x")}}, nil
	}
	if _, err := store.Open(ctx, cfg); err != nil {
		t.Errorf("Open with the fallback's secret files: %v", err)
	}
	cfg.FallbackCredentials = func(context.Context) (*store.SecretFiles, error) {
		return &store.SecretFiles{Source: "secret ns/empty", Files: map[string][]byte{"unrelated": []byte("x")}}, nil
	}
	if _, err := store.Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "COS credentials secret ns/empty") {
		t.Errorf("Open with a secret holding no credentials: %v, want an error naming the secret", err)
	}
	cfg.FallbackCredentials = nil
	cfg.Getenv = func(k string) string { return env[k] }
	cfg.MinThroughput = "fast"
	if _, err := store.Open(ctx, cfg); err == nil || !strings.HasPrefix(err.Error(), "--cos-min-throughput: ") {
		t.Errorf("Open with a bad minimum throughput: %v", err)
	}
}

// A store URL opens a real MinIO bucket, under both schemes of this
// backend: the location from the URL, the credentials from the
// environment (never the URL). What one writes under the URL's prefix the
// other reads.
func TestOpenURLMinIO(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewBucket(t)
	ctx := testCtx(t)
	env := map[string]string{cos.EnvAccessKeyID: m.AccessKey, cos.EnvSecretAccessKey: m.SecretKey}
	settings := store.Config{Getenv: func(k string) string { return env[k] }, MinThroughput: "off"}
	loc := store.Config{Kind: cos.Kind, Bucket: bucket, Prefix: "etcd/prod", Endpoint: m.Endpoint, Region: m.Region, CAFile: m.CAFile}
	raw := loc.URL()
	if !strings.HasPrefix(raw, "cos://"+bucket+"/etcd/prod?") {
		t.Fatalf("URL %q", raw)
	}
	w, err := store.OpenURL(ctx, raw, settings)
	if err != nil {
		t.Fatalf("OpenURL(%q): %v", raw, err)
	}
	if _, ok := w.(*cos.Store); !ok {
		t.Fatalf("OpenURL(%q): %T, want a *cos.Store", raw, w)
	}
	if err := w.(store.Checker).Check(ctx); err != nil {
		t.Fatalf("Check through the URL: %v", err)
	}
	if _, err := w.Put(ctx, loc.Prefix+"/hello", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	loc.Kind = cos.KindS3
	r, err := store.OpenURL(ctx, loc.URL(), settings)
	if err != nil {
		t.Fatalf("OpenURL(%q): %v", loc.URL(), err)
	}
	objs, err := r.List(ctx, loc.Prefix+"/")
	if err != nil || len(objs) != 1 || objs[0].Key != "etcd/prod/hello" {
		t.Fatalf("List through the s3:// URL: %v, %v; want etcd/prod/hello", objs, err)
	}
	// The credentials never come from the URL: none in the environment
	// is the backend's error, whatever the URL says.
	if _, err := store.OpenURL(ctx, raw, store.Config{}); err == nil {
		t.Error("OpenURL without credentials succeeded")
	}
}
