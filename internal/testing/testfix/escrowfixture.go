package testfix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// Escrow fixtures: committed backups whose manifests name an escrow
// (Manifest.Escrow), written directly, for the lifecycle, list, inspect
// and exporter tests. The escrow object's bytes are not an escrow: those
// tests never open it.

// EscrowAddress is a made-up escrow address (64 hex digits) named by seed.
func EscrowAddress(seed string) string {
	h := sha256.Sum256([]byte("escrow fixture " + seed))
	return hex.EncodeToString(h[:])
}

// EscrowCert is a made-up escrowed certificate of secret expiring at
// notAfter.
func EscrowCert(secret string, notAfter time.Time) catalog.EscrowCert {
	h := sha256.Sum256([]byte(secret + notAfter.String()))
	return catalog.EscrowCert{Secret: secret, Key: "tls.crt", Subject: "CN=" + secret, Issuer: "CN=etcd-ca", NotAfter: notAfter.UTC(),
		SHA256: hex.EncodeToString(h[:])}
}

// StoredEscrow is an EscrowRef of state (present or mismatch) at address,
// with certs.
func StoredEscrow(state catalog.EscrowState, address string, certs ...catalog.EscrowCert) *catalog.EscrowRef {
	r := &catalog.EscrowRef{State: state, Address: address, StoredSize: 1, StoredSHA256: strings.Repeat("ef", 32), RawSize: 1,
		RawSHA256: strings.Repeat("01", 32), Recipients: []string{"age1fixture"}, Objects: []string{"EtcdCluster/fixture"}, Certs: certs}
	if state == catalog.EscrowMismatch {
		r.Problems = []string{"the server certificate the members serve is not the escrowed one"}
	}
	return r
}

// PutEscrowBackup writes a committed scheduled backup of cluster at t
// whose manifest names ref (nil: a backup from before escrow), and, when
// ref names a stored escrow, that escrow's object when absent. It returns
// the backup's name.
func PutEscrowBackup(tb testing.TB, st store.Store, l catalog.Layout, cluster string, t time.Time, ref *catalog.EscrowRef) string {
	tb.Helper()
	ctx := context.Background()
	name := catalog.BackupName(t, catalog.KindScheduled)
	m := &catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: cluster, Name: name, Kind: catalog.KindScheduled,
		StartedAt: t, FinishedAt: t.Add(20 * time.Second), ServerVersion: "3.5.35",
		Source: catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096,
			RawSHA256: strings.Repeat("ab", 32), StoredSize: 1, StoredSHA256: strings.Repeat("cd", 32)},
		RevisionBefore: 100, RevisionAfter: 100, Escrow: ref, ToolVersion: "test",
	}
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		tb.Fatalf("escrow fixture: %v", err)
	}
	if ref.Stored() {
		PutEscrowObject(tb, st, l, cluster, ref.Address)
	}
	for _, o := range []struct {
		key  string
		body []byte
	}{{l.Key(cluster, name, catalog.SnapshotObjectZstd), []byte("x")}, {l.Key(cluster, name, catalog.ManifestObject), b}} {
		if _, err := st.Put(ctx, o.key, bytes.NewReader(o.body)); err != nil {
			tb.Fatalf("escrow fixture: put %s: %v", o.key, err)
		}
	}
	return name
}

// PutEscrowObject writes an escrow object of cluster at address (bytes
// that are not an escrow), unless one is there, and returns its key.
func PutEscrowObject(tb testing.TB, st store.Store, l catalog.Layout, cluster, address string) string {
	tb.Helper()
	key := l.EscrowKey(cluster, address)
	objs, err := st.List(context.Background(), key)
	if err != nil {
		tb.Fatalf("escrow fixture: list %s: %v", key, err)
	}
	if len(objs) > 0 {
		return key
	}
	if _, err := st.Put(context.Background(), key, bytes.NewReader([]byte("age fixture"))); err != nil {
		tb.Fatalf("escrow fixture: put %s: %v", key, err)
	}
	return key
}
