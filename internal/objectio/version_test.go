package objectio_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Expect.VersionID reads that version of the object (a backup behind a
// delete marker or an overwrite), checked against what it was written
// with; without it the current version is read; a store without versions
// refuses it.
func TestOpenVersion(t *testing.T) {
	ctx := context.Background()
	st := memstore.NewVersioned()
	enc := objectio.Encoding{Compression: objectio.CompressZstd}
	w, err := objectio.Write(ctx, st, "k", strings.NewReader(strings.Repeat("the backup's bytes ", 1000)), enc)
	if err != nil {
		t.Fatal(err)
	}
	vers, err := st.ListVersions(ctx, "k")
	if err != nil || len(vers) != 1 {
		t.Fatalf("versions: %v %v", vers, err)
	}
	first := vers[0].VersionID
	if _, err := st.Put(ctx, "k", strings.NewReader("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	exp := w.Expect(objectio.CompressZstd)
	if _, err := objectio.Open(ctx, st, "k", exp); !store.IsNotFound(err) {
		t.Fatalf("current version (a delete marker): %v", err)
	}
	exp.VersionID = first
	r, err := objectio.Open(ctx, st, "k", exp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil || len(b) != int(w.RawSize) {
		t.Fatalf("version %s: %d bytes, %v", first, len(b), err)
	}
	if _, err := objectio.Open(ctx, plainStore{memstore.New()}, "k", exp); !store.IsStoreError(err) || !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("a store without versions: %v", err)
	}
}

// plainStore is a store without any capability.
type plainStore struct{ store.Store }
