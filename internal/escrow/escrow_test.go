package escrow_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const cluster = "etcd-0123456789abcdef"

// readFile reads a test file.
func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// newList is a cluster's escrow as kube.CaptureEscrow makes it, its
// secrets from p (testfix.EscrowList).
func newList(tb testing.TB, p *testenv.PKI) *catalog.EscrowList {
	tb.Helper()
	return testfix.EscrowList(tb, p, "kubx-etcd-01", cluster)
}

// rig is a bucket of the shared MinIO behind a counting faults wrapper.
type rig struct {
	fs     *faults.Store
	layout catalog.Layout
}

func newRig(tb testing.TB, locked bool) *rig {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	bucket := m.NewBucket(tb)
	if locked {
		bucket = m.NewLockedBucket(tb)
	}
	return &rig{fs: faults.Wrap(testfix.Store(tb, m, bucket)), layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

func (r *rig) puts() int { return r.fs.CountCalls(faults.OpPut, catalog.EscrowSuffix) }

func TestStoreDedupes(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r := newRig(t, false)
	k1, k2 := testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	list := newList(t, testenv.NewPKI(t))
	plain, err := catalog.MarshalEscrow(list)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := escrow.SecretData(list, escrow.DefaultSecretNames(cluster).Server)
	if !bytes.Contains(data[escrow.ServerKeyKey], []byte("PRIVATE KEY-----")) {
		t.Fatal("the test's server secret holds no private key")
	}

	w1, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, testfix.RecipientsOf(t, k1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w1.Created || w1.Ref.State != catalog.EscrowPresent || w1.Key != r.layout.EscrowKey(cluster, w1.Ref.Address) || r.puts() != 1 {
		t.Fatalf("first store: %+v, %d puts", w1, r.puts())
	}
	if err := w1.Ref.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(w1.Ref.Objects, ","), "EtcdCluster/"+cluster+",Secret/"+cluster+"-client-tls,Secret/"+cluster+"-peer-tls,Secret/"+cluster+"-server-tls,Service/"+cluster+"-client-service-np"; got != want {
		t.Fatalf("objects %s, want %s", got, want)
	}
	stored := testfix.ReadObject(t, r.fs, w1.Key)
	if bytes.Contains(stored, []byte(base64.StdEncoding.EncodeToString(data[escrow.ServerKeyKey])[:40])) || bytes.Contains(stored, plain[:40]) || !bytes.HasPrefix(stored, []byte("age-encryption.org/v1")) {
		t.Fatalf("stored object is not sealed: %.80q", stored)
	}

	// The same list to the same recipient: nothing written, same address
	// and the stored object's own sha256.
	w2, err := escrow.Write(ctx, r.fs, r.layout, cluster, newListCopy(t, list), testfix.RecipientsOf(t, k1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Created || w2.Ref.Address != w1.Ref.Address || w2.Ref.StoredSHA256 != w1.Ref.StoredSHA256 || w2.Ref.StoredSize != w1.Ref.StoredSize || r.puts() != 1 {
		t.Fatalf("second store of the same list: created %v, %s vs %s, %d puts", w2.Created, w2.Ref.Address, w1.Ref.Address, r.puts())
	}

	// Another recipient: another address, a new object.
	w3, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, testfix.RecipientsOf(t, k2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w3.Created || w3.Ref.Address == w1.Ref.Address || r.puts() != 2 {
		t.Fatalf("another recipient: created %v, address %s (first %s), %d puts", w3.Created, w3.Ref.Address, w1.Ref.Address, r.puts())
	}
	// Each opens with its own identity only, to the same bytes.
	for _, c := range []struct {
		ref *catalog.EscrowRef
		key testfix.AgeKey
	}{{w1.Ref, k1}, {w2.Ref, k1}, {w3.Ref, k2}} {
		got, err := escrow.Open(ctx, r.fs, r.layout, cluster, c.ref, c.key.IDs)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := catalog.MarshalEscrow(got)
		if !bytes.Equal(b, plain) {
			t.Fatalf("opened escrow differs from the stored list")
		}
	}

	// No recipient: refused, nothing written.
	if _, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, seal.Recipients{}, nil); err == nil || r.puts() != 2 {
		t.Fatalf("no recipient: %v, %d puts", err, r.puts())
	}
}

// firstWrite is an unlocked rig, a key and the escrow of a new list
// written to it for that key.
func firstWrite(tb testing.TB, ctx context.Context) (*rig, testfix.AgeKey, *catalog.EscrowList, escrow.Written) {
	tb.Helper()
	r := newRig(tb, false)
	k := testfix.NewAgeKey(tb)
	list := newList(tb, testenv.NewPKI(tb))
	w, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, testfix.RecipientsOf(tb, k), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r, k, list, w
}

// newListCopy is list decoded from its bytes: what a second capture of an
// unchanged cluster gives.
func newListCopy(tb testing.TB, l *catalog.EscrowList) *catalog.EscrowList {
	tb.Helper()
	b, err := catalog.MarshalEscrow(l)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := catalog.UnmarshalEscrow(b)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// A concurrent writer stored the same escrow between the existence check
// and the create: the create is refused (store.ErrExists) and the object
// reused, with its own stored sha256.
func TestStoreConcurrentWriter(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r, k, list, w1 := firstWrite(t, ctx)
	// The second run's existence check misses it (a 404 once).
	r.fs.Inject(faults.Fault{Op: faults.OpGet, Key: w1.Key, Kind: faults.NotFound, Times: 1})
	w2, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, testfix.RecipientsOf(t, k), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Created || w2.Ref.StoredSHA256 != w1.Ref.StoredSHA256 || w2.Ref.Address != w1.Ref.Address {
		t.Fatalf("concurrent writer: created %v, stored sha256 %s (first %s)", w2.Created, w2.Ref.StoredSHA256, w1.Ref.StoredSHA256)
	}
	if n := r.puts(); n != 2 {
		t.Fatalf("%d puts; want 2 (the refused create included)", n)
	}
	if _, err := escrow.Open(ctx, r.fs, r.layout, cluster, w2.Ref, k.IDs); err != nil {
		t.Fatalf("the reused escrow does not open with the second run's ref: %v", err)
	}
}

// The escrow gets the backup's retention; a reuse by a backup locked
// longer extends it, never shortens it.
func TestStoreLock(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r := newRig(t, true)
	rs := testfix.RecipientsOf(t, testfix.NewAgeKey(t))
	list := newList(t, testenv.NewPKI(t))
	now := time.Now().UTC().Truncate(time.Second)
	lk := r.fs.Inner().(store.Locker)
	retention := func(key string) store.Retention {
		t.Helper()
		got, err := lk.Retention(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := &store.Retention{Mode: store.LockGovernance, Until: now.Add(time.Hour)}
	w, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, rs, first)
	if err != nil {
		t.Fatal(err)
	}
	if got := retention(w.Key); got.Mode != store.LockGovernance || !got.Until.Equal(first.Until) {
		t.Fatalf("new escrow retention %+v, want %+v", got, first)
	}
	longer := &store.Retention{Mode: store.LockGovernance, Until: now.Add(2 * time.Hour)}
	if _, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, rs, longer); err != nil {
		t.Fatal(err)
	}
	if got := retention(w.Key); !got.Until.Equal(longer.Until) {
		t.Fatalf("reused by a backup locked longer: retention %+v, want until %s", got, longer.Until)
	}
	shorter := &store.Retention{Mode: store.LockGovernance, Until: now.Add(30 * time.Minute)}
	if _, err := escrow.Write(ctx, r.fs, r.layout, cluster, list, rs, shorter); err != nil {
		t.Fatal(err)
	}
	if got := retention(w.Key); !got.Until.Equal(longer.Until) {
		t.Fatalf("reused by a backup locked shorter: retention %+v, want it kept at %s", got, longer.Until)
	}
	if r.puts() != 1 {
		t.Fatalf("%d puts; want 1", r.puts())
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r := newRig(t, false)
	k, other := testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	rs := testfix.RecipientsOf(t, k)
	p := testenv.NewPKI(t)
	w, err := escrow.Write(ctx, r.fs, r.layout, cluster, newList(t, p), rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustRefuse := func(what string, ref *catalog.EscrowRef, ids *seal.Identities, want string) {
		t.Helper()
		_, err := escrow.Open(ctx, r.fs, r.layout, cluster, ref, ids)
		if err == nil || !strings.Contains(err.Error(), w.Key) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want an error naming %s and saying %q", what, err, w.Key, want)
		}
		t.Logf("%s: %v", what, err)
	}
	mustRefuse("wrong identity", w.Ref, other.IDs, "no identity matches")

	// Another valid age object at that key (another cluster's secrets,
	// sealed to the same recipient).
	otherList := newList(t, testenv.NewPKI(t))
	plain, _ := catalog.MarshalEscrow(otherList)
	var sealed bytes.Buffer
	ew, err := objectio.NewWriter(&sealed, objectio.CompressNone, rs)
	if err != nil {
		t.Fatal(err)
	}
	ew.Write(plain)
	ew.Close()
	original := testfix.ReadObject(t, r.fs, w.Key)
	put := func(b []byte) {
		t.Helper()
		if _, err := r.fs.Inner().Put(ctx, w.Key, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	put(sealed.Bytes())
	mustRefuse("another valid age object", w.Ref, k.IDs, "refused")
	// ... even when the ref's sizes and sha256s were changed to match it:
	// the address is recomputed from the plaintext.
	forged := *w.Ref
	sum := objectio.NewHashCounter()
	sum.Write(sealed.Bytes())
	forged.StoredSize, forged.StoredSHA256 = sum.N(), sum.Sum()
	raw := objectio.NewHashCounter()
	raw.Write(plain)
	forged.RawSize, forged.RawSHA256 = raw.N(), raw.Sum()
	mustRefuse("another valid age object, sums forged", &forged, k.IDs, "address")

	// Bytes changed.
	tampered := bytes.Clone(original)
	tampered[len(tampered)-5] ^= 0x40
	put(tampered)
	mustRefuse("changed bytes", w.Ref, k.IDs, "refused")

	// The original opens again.
	put(original)
	if _, err := escrow.Open(ctx, r.fs, r.layout, cluster, w.Ref, k.IDs); err != nil {
		t.Fatal(err)
	}
}

// certOf is a certificate file's first certificate.
func certOf(tb testing.TB, path string) *x509.Certificate {
	tb.Helper()
	blk, _ := pem.Decode(readFile(tb, path))
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// setSecretKey replaces one key of one secret of the list.
func setSecretKey(l *catalog.EscrowList, secret, key string, b []byte) {
	it := escrow.Item(l, "Secret", secret)
	it["data"].(map[string]any)[key] = base64.StdEncoding.EncodeToString(b)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	p, wrong := testenv.NewPKI(t), testenv.NewPKI(t)
	dir := t.TempDir()
	rotCert, rotKey := filepath.Join(dir, "rot.crt"), filepath.Join(dir, "rot.key")
	p.IssueServer(t, rotCert, rotKey)
	names := escrow.DefaultSecretNames(cluster)
	serving := certOf(t, p.ServerCertFile)
	now := time.Now()
	const m1, m2 = "https://127.0.0.1:1", "https://127.0.0.2:1"

	cases := []struct {
		name     string
		edit     func(*catalog.EscrowList)
		served   map[string][]*x509.Certificate
		problems []string // each a substring of one problem, in order
		served1  bool     // the server certificate is marked Served
	}{
		{name: "served is escrowed", served: map[string][]*x509.Certificate{m1: {serving}, m2: {serving}}, served1: true},
		{name: "nothing served read", served: nil, problems: []string{"server certificate not compared: no member's served certificate was read"}},
		{name: "rotated server secret", edit: func(l *catalog.EscrowList) {
			setSecretKey(l, names.Server, escrow.ServerCertKey, readFile(t, rotCert))
			setSecretKey(l, names.Server, escrow.ServerKeyKey, readFile(t, rotKey))
		}, served: map[string][]*x509.Certificate{m1: {serving}, m2: {serving}},
			problems: []string{"member " + m1 + " serves certificate", "member " + m2 + " serves certificate"}},
		{name: "one member serves another", served: map[string][]*x509.Certificate{m1: {serving}, m2: {certOf(t, wrong.ServerCertFile)}},
			problems: []string{"member " + m2 + " serves certificate sha256"}},
		{name: "client not chained to CA", edit: func(l *catalog.EscrowList) {
			setSecretKey(l, names.Client, escrow.ClientCertKey, readFile(t, wrong.ClientCertFile))
		}, served: map[string][]*x509.Certificate{m1: {serving}}, served1: true,
			problems: []string{"client certificate of secret " + names.Client, "client certificate of secret " + names.Client + " (etcd-client.crt, CN=etcd-recovery-test,O=etcd-recovery tests) does not chain to the CA in secret " + names.Server}},
		{name: "server secret without certificate", edit: func(l *catalog.EscrowList) {
			delete(escrow.Item(l, "Secret", names.Server)["data"].(map[string]any), escrow.ServerCertKey)
		}, served: map[string][]*x509.Certificate{m1: {serving}}, problems: []string{"secret " + names.Server + " has no certificate in key server.crt"}},
		{name: "peer secret missing", edit: func(l *catalog.EscrowList) {
			l.Items = append(l.Items[:2], l.Items[3:]...)
		}, served: map[string][]*x509.Certificate{m1: {serving}}, served1: true, problems: []string{"secret " + names.Peer + " (peer TLS) is not in the escrow"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newList(t, p)
			if c.edit != nil {
				c.edit(l)
			}
			certs, problems := escrow.Check(l, c.served, now)
			if len(problems) != len(c.problems) {
				t.Fatalf("problems %q, want %d like %q", problems, len(c.problems), c.problems)
			}
			for i, want := range c.problems {
				if !strings.Contains(problems[i], want) {
					t.Fatalf("problem %d %q, want it to say %q", i, problems[i], want)
				}
			}
			var servedN int
			servedBy := map[string]catalog.EscrowCert{}
			for _, ce := range certs {
				if ce.NotAfter.IsZero() || len(ce.SHA256) != 64 || ce.Secret == "" || ce.Key == "" {
					t.Fatalf("cert without its facts: %+v", ce)
				}
				if ep, ok := strings.CutPrefix(ce.Key, "served by "); ok {
					servedBy[ep] = ce
					continue
				}
				if ce.Served {
					servedN++
					if ce.Secret != names.Server || ce.Key != escrow.ServerCertKey {
						t.Fatalf("served %+v", ce)
					}
				}
			}
			if (servedN == 1) != c.served1 {
				t.Fatalf("%d certificates served; want served %v", servedN, c.served1)
			}
			// A member serving another certificate than the escrowed one:
			// its certificate's expiry is recorded too (the expiry alert
			// watches what the members serve), under the server secret.
			for ep, chain := range c.served {
				got, ok := servedBy[ep]
				if len(chain) == 0 || chain[0].Equal(serving) && !strings.Contains(c.name, "rotated") {
					if ok {
						t.Fatalf("member %s serves the escrowed certificate, yet recorded as %+v", ep, got)
					}
					continue
				}
				if !ok || !got.Served || got.Secret != names.Server || !got.NotAfter.Equal(chain[0].NotAfter.UTC()) || got.SHA256 != escrow.Fingerprint(chain[0]) {
					t.Fatalf("member %s serves another certificate, recorded as %+v (present %v)", ep, got, ok)
				}
			}
		})
	}

	// Expiry is recorded: an expired client certificate in the escrow is
	// there with its NotAfter, and still chains.
	expCert, expKey := filepath.Join(dir, "exp.crt"), filepath.Join(dir, "exp.key")
	p.IssueClient(t, true, expCert, expKey)
	l := newList(t, p)
	setSecretKey(l, names.Client, escrow.ClientCertKey, readFile(t, expCert))
	certs, problems := escrow.Check(l, map[string][]*x509.Certificate{m1: {serving}}, now)
	if len(problems) != 0 {
		t.Fatalf("expired client certificate: problems %q", problems)
	}
	found := false
	for _, ce := range certs {
		if ce.Secret == names.Client && ce.Key == escrow.ClientCertKey {
			found = ce.NotAfter.Before(now) && ce.NotAfter.Equal(certOf(t, expCert).NotAfter.UTC())
		}
	}
	if !found {
		t.Fatalf("the expired client certificate's NotAfter is not recorded: %+v", certs)
	}
	ref := &catalog.EscrowRef{Certs: certs}
	if got := ref.NearestExpiry(); !got.Equal(certOf(t, expCert).NotAfter.UTC()) {
		t.Fatalf("nearest expiry %s", got)
	}
}

// Served reads what a real etcd member serves; Check marks it.
func TestServed(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, IP: "127.0.0.1"})
	ctx := testfix.Context(t, 30*time.Second)
	dead := "https://127.0.0.1:1"
	served, problems := escrow.Served(ctx, append(c.Endpoints(), dead), c.PKI.ClientTLS())
	if len(served) != 1 || len(problems) != 1 || !strings.Contains(problems[0], "member "+dead) {
		t.Fatalf("served %d, problems %q", len(served), problems)
	}
	ep := c.Endpoints()[0]
	if !served[ep][0].Equal(certOf(t, c.PKI.ServerCertFile)) {
		t.Fatalf("%s served %s, not the PKI's server certificate", ep, served[ep][0].Subject)
	}
	certs, problems := escrow.Check(newList(t, c.PKI), served, time.Now())
	n := 0
	for _, ce := range certs {
		if ce.Served {
			n++
		}
	}
	if len(problems) != 0 || n != 1 {
		t.Fatalf("problems %q, %d served", problems, n)
	}
	// A CA the member's certificate does not chain to: the handshake
	// fails, named (verification is never off).
	_, problems = escrow.Served(ctx, c.Endpoints(), testenv.NewPKI(t).ClientTLS())
	if len(problems) != 1 || !strings.Contains(problems[0], "member "+ep) {
		t.Fatalf("wrong CA: problems %q", problems)
	}
}

// A damaged escrow (its size changed) is not reused silently: the next
// store at its address is a mismatch naming the key, as the sealed size
// of the same plaintext to the same recipients is known.
func TestStoreDamagedReuse(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r, k, list, w1 := firstWrite(t, ctx)
	// The same bytes reused: present.
	w2, err := escrow.Write(ctx, r.fs, r.layout, cluster, newListCopy(t, list), testfix.RecipientsOf(t, k), nil)
	if err != nil || w2.Created || w2.Ref.State != catalog.EscrowPresent || len(w2.Ref.Problems) != 0 {
		t.Fatalf("intact reuse: %+v %v", w2.Ref, err)
	}
	// Damage it: truncated by 100 bytes.
	stored := testfix.ReadObject(t, r.fs, w1.Key)
	if err := r.fs.Delete(ctx, []string{w1.Key}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.fs.Put(ctx, w1.Key, bytes.NewReader(stored[:len(stored)-100])); err != nil {
		t.Fatal(err)
	}
	w3, err := escrow.Write(ctx, r.fs, r.layout, cluster, newListCopy(t, list), testfix.RecipientsOf(t, k), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w3.Created || w3.Ref.State != catalog.EscrowMismatch || len(w3.Ref.Problems) != 1 || !strings.Contains(w3.Ref.Problems[0], w1.Key) ||
		!strings.Contains(w3.Ref.Problems[0], "damaged") {
		t.Fatalf("damaged reuse: %+v; want mismatch naming %s", w3.Ref, w1.Key)
	}
	if err := w3.Ref.Validate(); err != nil {
		t.Fatal(err)
	}
}
