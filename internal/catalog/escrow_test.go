package catalog_test

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

func escrowList(secretValue string) *catalog.EscrowList {
	return &catalog.EscrowList{APIVersion: "v1", Kind: "List", Metadata: map[string]any{}, Items: []map[string]any{
		{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
			"metadata": map[string]any{"name": "etcd-a", "namespace": "kubx-etcd-01"}, "spec": map[string]any{"size": 3, "version": "3.5.35"}},
		{"kind": "Secret", "apiVersion": "v1", "type": "Opaque",
			"metadata": map[string]any{"namespace": "kubx-etcd-01", "name": "etcd-a-server-tls"}, "data": map[string]any{"server.key": secretValue}},
	}}
}

// The address depends on the plaintext and on the recipients (not their
// order), so an escrow is stored once per content and recipient set; the
// canonical encoding does not depend on map order.
func TestEscrowAddress(t *testing.T) {
	t.Parallel()
	a, err := catalog.MarshalEscrow(escrowList("k1"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := catalog.MarshalEscrow(escrowList("k1"))
	if string(a) != string(again) {
		t.Fatalf("the same objects marshal differently:\n%s\n%s", a, again)
	}
	b, _ := catalog.MarshalEscrow(escrowList("k2"))
	rs := []string{"age1b", "age1a"}
	addr := catalog.EscrowAddress(rs, a)
	if got := catalog.EscrowAddress([]string{"age1a", "age1b"}, a); got != addr {
		t.Error("the recipients' order changes the address")
	}
	if catalog.EscrowAddress(rs, b) == addr {
		t.Error("other content, same address")
	}
	if catalog.EscrowAddress([]string{"age1a"}, a) == addr {
		t.Error("other recipients, same address")
	}
	if rs[0] != "age1b" {
		t.Error("EscrowAddress sorted the caller's slice")
	}
	got, err := catalog.UnmarshalEscrow(a)
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Join(got.ObjectNames(), ","); names != "EtcdCluster/etcd-a,Secret/etcd-a-server-tls" {
		t.Errorf("objects %s", names)
	}
}

// What a server sets is never escrowed, nor a status; exactly one
// EtcdCluster.
func TestEscrowListValidate(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"uid", "resourceVersion", "ownerReferences", "managedFields", "creationTimestamp"} {
		l := escrowList("k")
		l.Items[1]["metadata"].(map[string]any)[f] = "x"
		if _, err := catalog.MarshalEscrow(l); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("metadata.%s: %v", f, err)
		}
	}
	l := escrowList("k")
	l.Items[0]["status"] = map[string]any{"phase": "Running"}
	if _, err := catalog.MarshalEscrow(l); err == nil {
		t.Error("a status was accepted")
	}
	l = escrowList("k")
	l.Items = l.Items[1:]
	if _, err := catalog.MarshalEscrow(l); err == nil {
		t.Error("a List without an EtcdCluster was accepted")
	}
	l = escrowList("k")
	l.Kind = "Secret"
	if _, err := catalog.MarshalEscrow(l); err == nil {
		t.Error("not a List, accepted")
	}
	if _, err := catalog.UnmarshalEscrow([]byte(`{"apiVersion":"v1","kind":"List","items":[{"kind":"Secret"}]}`)); err == nil {
		t.Error("an item without apiVersion and name was accepted")
	}
	if _, err := catalog.UnmarshalEscrow(make([]byte, catalog.MaxEscrowBytes+1)); err == nil {
		t.Error("an escrow over the bound was accepted")
	}
}

// Escrow keys are the tool's own: classified with their cluster and
// address; anything else under the folder is unknown.
func TestClassifyEscrow(t *testing.T) {
	t.Parallel()
	addr := strings.Repeat("ab", 32)
	for _, prefix := range []string{"", "kubx-etcd-01"} {
		l := catalog.Layout{Prefix: prefix}
		key := l.EscrowKey("etcd-a", addr)
		if want := l.RootPrefix() + "_escrow/etcd-a/" + addr + ".json.age"; key != want {
			t.Fatalf("key %s, want %s", key, want)
		}
		if ki := l.Classify(key); ki.Kind != catalog.KeyEscrow || ki.ClusterID != "etcd-a" || ki.Name != addr {
			t.Errorf("%s: %+v", key, ki)
		}
		for _, bad := range []string{
			l.EscrowPrefix("etcd-a") + addr + ".json",            // not sealed
			l.EscrowPrefix("etcd-a") + "abc.json.age",            // not an address
			l.EscrowPrefix("_x") + addr + ".json.age",            // not a cluster id
			l.EscrowPrefix("etcd-a") + "x/" + addr + ".json.age", // nested
			l.EscrowPrefix("") + addr + ".json.age",              // no cluster
			l.EscrowPrefix("etcd-a") + strings.ToUpper(addr) + ".json.age",
		} {
			if ki := l.Classify(bad); ki.Kind != catalog.KeyUnknown {
				t.Errorf("%s: %+v, want unknown", bad, ki)
			}
		}
	}
}

// A manifest's escrow reference is checked when the manifest is read.
func TestManifestEscrowValidate(t *testing.T) {
	t.Parallel()
	addr := strings.Repeat("0f", 32)
	base := func(e *catalog.EscrowRef) []byte {
		m := &catalog.Manifest{Format: 1, ClusterID: "c", Name: "n", Snapshot: catalog.SnapshotInfo{Object: "snapshot.db.zst", RawSHA256: "x"}, Escrow: e}
		b, err := catalog.MarshalManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := &catalog.EscrowRef{State: catalog.EscrowPresent, Address: addr, StoredSHA256: "s", RawSHA256: "r", Recipients: []string{"age1x"},
		Certs: []catalog.EscrowCert{{NotAfter: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}, {NotAfter: time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)}}}
	m, err := catalog.UnmarshalManifest(base(good))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Escrow.Usable() || !m.Escrow.Stored() || catalog.StateOf(m) != catalog.EscrowPresent {
		t.Errorf("a present escrow reads as %+v", m.Escrow)
	}
	if got := m.Escrow.NearestExpiry(); !got.Equal(time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("nearest expiry %v", got)
	}
	// An invalid escrow reference never makes the data backup unreadable
	// (data first): the manifest loads, its escrow reads as missing (not
	// usable, not stored) with a problem saying why.
	for name, e := range map[string]*catalog.EscrowRef{
		"unknown state":        {State: "lost"},
		"future state":         {State: "expired", Address: addr, StoredSHA256: "s", RawSHA256: "r", Recipients: []string{"a"}},
		"present, no address":  {State: catalog.EscrowPresent, StoredSHA256: "s", RawSHA256: "r", Recipients: []string{"a"}},
		"present, no sha":      {State: catalog.EscrowPresent, Address: addr, Recipients: []string{"a"}},
		"missing with address": {State: catalog.EscrowMissing, Address: addr},
	} {
		m, err := catalog.UnmarshalManifest(base(e))
		if err != nil {
			t.Errorf("%s: the manifest is unreadable: %v", name, err)
			continue
		}
		if m.Escrow.Usable() || m.Escrow.Stored() || m.Escrow.State != catalog.EscrowMissing || m.Escrow.Validate() != nil {
			t.Errorf("%s: reads as %+v, want state missing, not usable", name, m.Escrow)
		}
		if len(m.Escrow.Problems) == 0 || !strings.Contains(m.Escrow.Problems[0], "escrow reference is not valid") {
			t.Errorf("%s: problems %q do not say why", name, m.Escrow.Problems)
		}
	}
	for _, e := range []*catalog.EscrowRef{{State: catalog.EscrowNone, Problems: []string{"no recipient"}}, {State: catalog.EscrowMissing}} {
		m, err := catalog.UnmarshalManifest(base(e))
		if err != nil {
			t.Fatal(err)
		}
		if m.Escrow.Usable() || m.Escrow.Stored() {
			t.Errorf("%s reads as usable or stored", e.State)
		}
	}
	if m, _ := catalog.UnmarshalManifest(base(nil)); catalog.StateOf(m) != "" || m.Escrow.Usable() {
		t.Error("an older manifest has an escrow state")
	}
}
