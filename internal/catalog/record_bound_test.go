package catalog_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// A manifest is bounded as it always was (1 MiB): a valid manifest
// padded past the bound is damaged (its backup is not restored from and
// is listed as such), not read; a store failure is not damage; a gap
// record past the bound is refused the same way.
func TestRecordBounds(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	l := catalog.Layout{Prefix: "p"}
	at := time.Date(2026, 11, 1, 3, 3, 0, 0, time.UTC)
	name := catalog.BackupName(at, catalog.KindScheduled)
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: "c1", Name: name, Kind: catalog.KindScheduled, StartedAt: at,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObject(objectio.CompressZstd, false), Compression: objectio.CompressZstd, RawSHA256: strings.Repeat("ab", 32)}}
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, body []byte) {
		t.Helper()
		if _, err := st.Put(ctx, key, bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	key := l.Key("c1", name, catalog.ManifestObject)
	put(key, b)
	if _, err := catalog.LoadManifest(ctx, st, l, "c1", name); err != nil {
		t.Fatalf("the manifest as written: %v", err)
	}
	// Valid JSON, padded with whitespace past the bound.
	put(key, append(b, bytes.Repeat([]byte(" "), catalog.MaxManifestBytes)...))
	if _, err := catalog.LoadManifest(ctx, st, l, "c1", name); !errors.Is(err, objectio.ErrDamagedRecord) {
		t.Fatalf("a manifest past %d bytes: %v, want damaged", catalog.MaxManifestBytes, err)
	}
	entries, err := catalog.Inventory(ctx, st, l, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := catalog.CheckEntries(ctx, st, l, entries, 1); err != nil {
		t.Fatalf("a damaged manifest is not a store failure: %v", err)
	}
	if entries[0].Damaged == "" {
		t.Fatalf("the padded manifest's backup is not damaged: %+v", entries[0])
	}
	// A gap record past the bound.
	gk := l.JournalGapKey("c1", 7)
	put(gk, append([]byte(`{"clusterID":"c1","from":7,"reason":"x","time":"2026-11-01T00:00:00Z"}`), bytes.Repeat([]byte(" "), catalog.MaxManifestBytes)...))
	if _, err := catalog.ReadJournalGap(ctx, st, gk); !errors.Is(err, objectio.ErrDamagedRecord) {
		t.Fatalf("a gap record past the bound: %v, want damaged", err)
	}
	// Not found is the store's not found, not damage.
	if _, err := catalog.ReadJournalGap(ctx, st, l.JournalGapKey("c1", 8)); !store.IsNotFound(err) || errors.Is(err, objectio.ErrDamagedRecord) {
		t.Fatalf("a missing gap record: %v, want not found", err)
	}
}
