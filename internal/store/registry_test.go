package store_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

func TestOpenUnknownKind(t *testing.T) {
	_, err := store.Open(context.Background(), store.Config{Kind: "nope"})
	if err == nil {
		t.Fatal("Open of an unknown kind succeeded")
	}
	// The error names the kind and lists the known ones.
	if !strings.Contains(err.Error(), `unknown kind "nope"`) || !strings.Contains(err.Error(), memstore.Kind) {
		t.Errorf("Open: %v: want the kind and the known kinds named", err)
	}
	if want := "(known: " + strings.Join(store.Kinds(), ", ") + ")"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Open: %v: want it to end with %s", err, want)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), memstore.Kind) {
			t.Errorf("second Register of %q: recovered %v, want a panic naming the kind", memstore.Kind, r)
		}
	}()
	store.Register(memstore.Kind, func(context.Context, store.Config) (store.Store, error) { return nil, errors.New("unused") })
}

func TestRegisterEmptyPanics(t *testing.T) {
	for _, c := range []struct {
		kind string
		f    store.Factory
	}{{"", func(context.Context, store.Config) (store.Store, error) { return nil, nil }}, {"x-nil", nil}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, nil=%v) did not panic", c.kind, c.f == nil)
				}
			}()
			store.Register(c.kind, c.f)
		}()
	}
	for _, k := range store.Kinds() {
		if k == "" || k == "x-nil" {
			t.Errorf("kind %q registered after a panicking Register", k)
		}
	}
}

// The in-memory backend through the registry: two Opens of one bucket
// are one store; another bucket is another.
func TestOpenMemRoundTrip(t *testing.T) {
	ctx := context.Background()
	cfg := store.Config{Kind: memstore.Kind, Bucket: "registry-test"}
	w, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, "a/b", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := r.Get(ctx, "a/b")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil || string(got) != "hello" {
		t.Fatalf("Get a/b = %q, %v: want hello", got, err)
	}
	other, err := store.Open(ctx, store.Config{Kind: memstore.Kind, Bucket: "registry-test-other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(ctx, "a/b"); !store.IsNotFound(err) {
		t.Errorf("Get a/b from another bucket: %v, want not found", err)
	}
}
