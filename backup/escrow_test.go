package backup_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// TestEscrowStep: the escrow step of one backup against a real etcd with
// TLS and MinIO, the capture given as Options.Escrow (kube's, in
// production; fleet's test runs it through the API): every state, the
// versions and the served certificate filled in, the report's line, and
// the backup never failed by it; a failed backup removes no escrow,
// neither one it created nor one it reused.
func TestEscrowStep(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1, IP: "127.0.37.10"})
	r := newRig(t, c, testenv.SharedMinIO(t))
	ctx := testfix.Context(t, 2*time.Minute)
	key := testfix.NewAgeKey(t)
	const id = "etcd-escrowstep"
	list := testfix.EscrowList(t, c.PKI, "kubx-etcd-01", id)
	capture := func(context.Context) (*catalog.EscrowList, []string, error) {
		// A fresh copy each time, as a capture reads the API anew.
		b, _ := catalog.MarshalEscrow(list)
		l, err := catalog.UnmarshalEscrow(b)
		return l, nil, err
	}
	run := func(opts backup.Options) *catalog.Manifest {
		t.Helper()
		res, err := backup.Run(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // names have millisecond precision
		return res.Manifest
	}
	base := r.Options(t, id)

	// No escrow step: the manifest says nothing (backups of library
	// callers and of the earlier versions).
	if m := run(base); m.Escrow != nil {
		t.Fatalf("no escrow step: %+v", m.Escrow)
	}
	// No Kubernetes client: missing, or none without a recipient.
	o := base
	o.NoEscrow = backup.NoKubeClient
	if e := run(o).Escrow; e == nil || e.State != catalog.EscrowNone || !strings.Contains(e.Problems[0], "no recipient") {
		t.Fatalf("no client, no recipient: %+v", e)
	}
	o.Recipients = testfix.RecipientsOf(t, key)
	if e := run(o).Escrow; e == nil || e.State != catalog.EscrowMissing || len(e.Problems) != 1 || e.Problems[0] != backup.NoKubeClient {
		t.Fatalf("no client: %+v", e)
	}

	// Captured and encrypted: present, the member's served certificate,
	// the versions.
	o = base
	o.Recipients, o.Escrow = testfix.RecipientsOf(t, key), capture
	m := run(o)
	e := m.Escrow
	if e == nil || e.State != catalog.EscrowPresent || len(e.Problems) != 0 || e.BreakGlass {
		t.Fatalf("present: %+v", e)
	}
	opened, err := escrow.Open(ctx, r.Store, r.Layout, id, e, key.IDs)
	if err != nil {
		t.Fatal(err)
	}
	v, err := escrow.Versions(opened)
	if err != nil || v.Etcd[m.Source.Name] != m.ServerVersion || v.Storage != m.ClusterVersion || v.Storage == "" || v.EtcdClusterAPI == "" {
		t.Fatalf("versions %+v (manifest: source %s %s, cluster %s): %v", v, m.Source.Name, m.ServerVersion, m.ClusterVersion, err)
	}
	served := false
	for _, ce := range e.Certs {
		served = served || ce.Served && ce.Key == escrow.ServerCertKey
	}
	if !served {
		t.Fatalf("the served server certificate is not marked: %+v", e.Certs)
	}
	tables := backup.NewReport(&backup.Result{Manifest: m}).Tables()
	if line := backup.EscrowLine(e); !strings.HasPrefix(line, "escrow: present ("+e.Address[:12]) || !strings.Contains(line, "nearest certificate expiry") ||
		!strings.Contains(tables[0].Footer, line) {
		t.Fatalf("report: %q in footer %q", line, tables[0].Footer)
	}
	t.Logf("report footer: %s", tables[0].Footer)

	// The capture fails: missing, named, the backup committed.
	o.Escrow = func(context.Context) (*catalog.EscrowList, []string, error) {
		return nil, nil, errors.New("etcdclusters.etcd.database.coreos.com \"x\" is forbidden")
	}
	if e := run(o).Escrow; e.State != catalog.EscrowMissing || !strings.Contains(e.Problems[0], "forbidden") ||
		!strings.Contains(backup.EscrowLine(e), "escrow: missing (reading it from Kubernetes:") {
		t.Fatalf("capture failed: %+v", e)
	}

	// A failed backup (its manifest refused) keeps the escrow it created
	// ...
	o.Escrow = capture
	other := testfix.NewAgeKey(t)
	o.Recipients = testfix.RecipientsOf(t, other)
	fs, err := r.runFaulty(o, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.ServerError})
	assertStepError(t, err, backup.StepManifest, "503")
	if n := fs.CountCalls(faults.OpPut, catalog.EscrowSuffix); n != 1 {
		t.Fatalf("%d escrow puts", n)
	}
	objs, err := r.Store.List(ctx, r.Layout.EscrowPrefix(id))
	if err != nil {
		t.Fatal(err)
	}
	// A failed backup never deletes an escrow, even one it created: a
	// concurrent backup may have reused its address and committed (the
	// grace and prune remove an escrow no backup names).
	if len(objs) != 2 { // the present one above and the failed run's
		t.Fatalf("escrows after a failed backup: %v", objs)
	}
	// ... never one it reused.
	o.Recipients = testfix.RecipientsOf(t, key)
	fs, err = r.runFaulty(o, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.ServerError})
	assertStepError(t, err, backup.StepManifest, "503")
	if n := fs.CountCalls(faults.OpPut, catalog.EscrowSuffix); n != 0 {
		t.Fatalf("the reused escrow was written again: %d puts", n)
	}
	if _, err := escrow.Open(ctx, r.Store, r.Layout, id, e, key.IDs); err != nil {
		t.Fatalf("a failed backup removed the escrow it reused: %v", err)
	}
}
