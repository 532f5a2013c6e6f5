package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// FleetWorldOptions shape StartFleetWorld's world.
type FleetWorldOptions struct {
	// Namespaces (default kubx-etcd-01 and kubx-etcd-02).
	Namespaces []string
	// Clusters per namespace (default 5): etcd-f00, etcd-f01, … in each.
	Clusters int
	// ThreeMember is how many clusters of the first namespace (its first
	// ones) have three members; the others have one. Default 1; -1: none.
	ThreeMember int
	// Customers is how many clusters of the first namespace (after the
	// three-member ones) hold the data of a real customer kube-apiserver
	// (CustomerMaster) instead of testenv.PutKeys'. Default 1; -1: none.
	Customers int
	// Subnet is the third byte of the world's loopback IPs, 127.0.Subnet.x
	// (required, one no other test uses): cluster i of the world (counted
	// across namespaces) listens on .(10+i), customer i's NodePort on
	// .(200+i).
	Subnet int
	// Keys and ValueSize of testenv.PutKeys (default 40 keys of 512
	// bytes; cluster i gets Keys+i).
	Keys, ValueSize int
	// FillBytes, when set, fills each cluster that has no customer master
	// with about that many bytes of large random values
	// (testfix.FillLarge) instead of PutKeys (the benchmark's sizes).
	FillBytes int64
	// RunningDelay of each namespace's restore operator stand-in (default
	// 500ms).
	RunningDelay time.Duration
}

// FleetWorld is the world of a namespace-wide restore's tests: one real
// kube-apiserver (the management cluster) with deploy/'s CRDs, MinIO (one
// bucket of the world's own), and namespaces, each with deploy/10-rbac.yaml,
// its cos-credentials secret, its restore operator stand-in (Concurrent)
// and EtcdClusters backed by real etcd with TLS (AddEtcdCluster), each on
// its own loopback IP with its client-TLS access (PerClusterAccess), data,
// and one backup taken by the real backup code (backup.Run, encrypted to
// the world's age key, escrowed: the rebuild's input) under the
// namespace's store prefix, the chart's default "<namespace>/".
type FleetWorld struct {
	K      *testenv.KubeAPIServer
	Admin  *kubernetes.Clientset
	Dyn    *dynamic.DynamicClient
	A      *Applier
	MinIO  *testenv.MinIO
	Bucket string
	Store  *cos.Store
	// Key is the age key the backups are encrypted (and escrowed) to;
	// IdentityFile holds it, for the CLI's --identity-file.
	Key          testfix.AgeKey
	IdentityFile string
	Namespaces   []*FleetNamespace
	// Started is how long StartFleetWorld took.
	Started time.Duration
}

// FleetNamespace is one namespace of a FleetWorld.
type FleetNamespace struct {
	Name     string
	Layout   catalog.Layout
	Operator *RestoreOperator
	Clusters []*FleetCluster
}

// FleetCluster is one EtcdCluster of a FleetWorld.
type FleetCluster struct {
	Cluster
	Namespace string
	// Backup is the backup the world took of it (its newest).
	Backup *catalog.Manifest
	// Customer is the customer master whose data it holds (nil: PutKeys).
	Customer *CustomerMaster
	// Killed are the members LoseQuorum killed.
	Killed []*testenv.EtcdMember
	// admin writes the member pods' status (LoseQuorum).
	admin kubernetes.Interface
}

// ClientURL is what the customer's kube-apiserver reaches the cluster at.
func (c *FleetCluster) ClientURL() string {
	return fmt.Sprintf("https://%s-client.%s.svc:%d", c.Name, c.Namespace, kube.ClientPort)
}

// StartFleetWorld starts the world (see FleetWorld) and logs how long each
// part took. Every server stops when the test ends.
func StartFleetWorld(tb testing.TB, o FleetWorldOptions) *FleetWorld {
	tb.Helper()
	if o.Subnet <= 0 || o.Subnet > 254 {
		tb.Fatalf("kubetest: StartFleetWorld: Subnet %d: want the third byte of 127.0.x.y that no other test uses", o.Subnet)
	}
	if len(o.Namespaces) == 0 {
		o.Namespaces = []string{"kubx-etcd-01", "kubx-etcd-02"}
	}
	if o.Clusters == 0 {
		o.Clusters = 5
	}
	if o.ThreeMember == 0 {
		o.ThreeMember = 1
	}
	if o.Customers == 0 {
		o.Customers = 1
	}
	if o.Keys == 0 {
		o.Keys = 40
	}
	if o.ValueSize == 0 {
		o.ValueSize = 512
	}
	if o.RunningDelay == 0 {
		o.RunningDelay = 500 * time.Millisecond
	}
	ctx := context.Background()
	start, t0 := time.Now(), time.Now()
	rw := StartRBACWorld(tb, o.Namespaces...)
	w := &FleetWorld{K: rw.K, Admin: rw.Admin, Dyn: rw.Dyn, A: rw.A, MinIO: testenv.SharedMinIO(tb)}
	w.Bucket = w.MinIO.NewBucket(tb)
	w.Store = testfix.Store(tb, w.MinIO, w.Bucket)
	w.Key, w.IdentityFile = newAgeIdentityFile(tb)
	tb.Logf("fleet world: kube-apiserver, CRDs, RBAC and MinIO in %v", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	i := 0
	for nsIdx, ns := range o.Namespaces {
		CreateCOSSecret(tb, w.Admin, ns, w.MinIO)
		fn := &FleetNamespace{Name: ns, Layout: catalog.Layout{Prefix: ns}}
		fn.Operator = StartRestoreOperator(tb, RestoreOperatorOptions{Namespace: ns, Client: w.Admin, Dynamic: w.Dyn,
			RunningDelay: o.RunningDelay, Concurrent: true})
		for j := range o.Clusters {
			name := fmt.Sprintf("etcd-f%02d", j)
			ip := fmt.Sprintf("127.0.%d.%d", o.Subnet, 10+i)
			eo := testenv.EtcdOptions{IP: ip, Members: 1}
			if nsIdx == 0 && j < o.ThreeMember {
				eo.Members = 3
			}
			customer := nsIdx == 0 && j >= max(o.ThreeMember, 0) && j < max(o.ThreeMember, 0)+max(o.Customers, 0)
			nodeIP := fmt.Sprintf("127.0.%d.%d", o.Subnet, 200+i)
			if customer {
				// The NodePort's "node" IP is in the server certificate,
				// as a worker node's is on the carrier's.
				eo.PKI = testenv.NewPKI(tb, net.ParseIP(ip), net.ParseIP(nodeIP))
			}
			fc := &FleetCluster{Cluster: AddEtcdCluster(tb, w.Admin, w.Dyn, ns, name, eo), Namespace: ns, admin: w.Admin}
			PerClusterAccess(tb, w.A, ns, name)
			fn.Operator.Register(fc.Cluster)
			if customer {
				np := StartNodePort(tb, w.Admin, ns, name+"-client-service-np", nodeIP)
				fc.Customer = StartCustomerMaster(tb, ctx, w.Admin, ns, name, np)
				fc.Customer.Fill(tb, ctx, 20)
				fc.Customer.Want = fc.Customer.Objects(tb, ctx)
				fc.Customer.Stop()
			} else if o.FillBytes > 0 {
				testfix.FillLarge(tb, fc.Etcd.Client(tb), o.FillBytes)
			} else {
				testenv.PutKeys(tb, fc.Etcd.Client(tb), "/registry/k", o.Keys+i, o.ValueSize)
			}
			fn.Clusters = append(fn.Clusters, fc)
			i++
		}
		w.Namespaces = append(w.Namespaces, fn)
	}
	tb.Logf("fleet world: %d EtcdClusters in %d namespaces started and filled in %v", i, len(o.Namespaces), time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	w.BackupAll(tb, ctx)
	tb.Logf("fleet world: %d encrypted, escrowed backups in %v", i, time.Since(t0).Round(time.Millisecond))
	w.Started = time.Since(start)
	tb.Logf("fleet world: started in %v", w.Started.Round(time.Millisecond))
	return w
}

// Namespace is the world's namespace named ns.
func (w *FleetWorld) Namespace(tb testing.TB, ns string) *FleetNamespace {
	tb.Helper()
	for _, n := range w.Namespaces {
		if n.Name == ns {
			return n
		}
	}
	tb.Fatalf("kubetest: no namespace %s in the fleet world", ns)
	return nil
}

// Clusters are every cluster of the world, namespace by namespace.
func (w *FleetWorld) Clusters() []*FleetCluster {
	var out []*FleetCluster
	for _, n := range w.Namespaces {
		out = append(out, n.Clusters...)
	}
	return out
}

// Kube is a kube client of namespace ns acting with token ("": the admin).
func (w *FleetWorld) Kube(tb testing.TB, ns, token string) *kube.Client {
	tb.Helper()
	c, err := kube.New(kube.Config{Rest: w.K.RestConfig(token), Namespace: ns})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Toolkit is a kube client of namespace ns as the toolkit's service
// account (etcd-recovery-toolkit, what an SRE's restore runs as).
func (w *FleetWorld) Toolkit(tb testing.TB, ns string) *kube.Client {
	tb.Helper()
	return w.Kube(tb, ns, SAToken(tb, w.Admin, ns, "etcd-recovery-toolkit"))
}

// ToolkitKubeconfig is a kubeconfig of namespace ns as the toolkit's
// service account, for the CLI.
func (w *FleetWorld) ToolkitKubeconfig(tb testing.TB, ns string) string {
	tb.Helper()
	return w.K.Kubeconfig(tb, SAToken(tb, w.Admin, ns, "etcd-recovery-toolkit"), ns)
}

// StoreArgs are the CLI's store flags for the world's bucket (the
// credentials go in StoreEnv, never in argv).
func (w *FleetWorld) StoreArgs() []string {
	return []string{"--cos-endpoint", w.MinIO.Endpoint, "--cos-region", w.MinIO.Region, "--bucket", w.Bucket}
}

// StoreEnv is the CLI's environment with the world's store credentials.
func (w *FleetWorld) StoreEnv() []string {
	return []string{"COS_ACCESS_KEY_ID=" + w.MinIO.AccessKey, "COS_SECRET_ACCESS_KEY=" + w.MinIO.SecretKey}
}

// BackupAll takes one backup of every cluster of the world (backup.Run,
// scheduled, encrypted to w.Key, its escrow captured through the admin's
// kube client), four at a time, and records it as the cluster's Backup.
func (w *FleetWorld) BackupAll(tb testing.TB, ctx context.Context) {
	tb.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(w.Clusters()))
	for _, n := range w.Namespaces {
		admin := w.Kube(tb, n.Name, "")
		for _, c := range n.Clusters {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				kc, err := admin.Clusters(ctx, c.Name)
				if err != nil || len(kc) != 1 {
					errs <- fmt.Errorf("%s/%s: %d clusters, %v", n.Name, c.Name, len(kc), err)
					return
				}
				res, err := backup.Run(ctx, backup.Options{ClusterID: c.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c.Etcd),
					Store: w.Store, Layout: n.Layout, ProbeTimeout: 5 * time.Second, Recipients: testfix.RecipientsOf(tb, w.Key),
					Escrow: func(ctx context.Context) (*catalog.EscrowList, []string, error) {
						return admin.CaptureEscrow(ctx, kc[0])
					}})
				if err != nil {
					errs <- fmt.Errorf("backup of %s/%s: %w", n.Name, c.Name, err)
					return
				}
				if !res.Manifest.Escrow.Usable() {
					errs <- fmt.Errorf("backup of %s/%s: escrow %+v", n.Name, c.Name, res.Manifest.Escrow)
					return
				}
				c.Backup = res.Manifest
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Error(err)
	}
	if tb.Failed() {
		tb.FailNow()
	}
}

// LoseQuorum kills a majority of the members of each cluster of the
// namespace (every member of a single-member one, two of three): the
// EtcdClusters, their pods and Services stay, as when nodes die.
func (n *FleetNamespace) LoseQuorum(tb testing.TB) {
	tb.Helper()
	for _, c := range n.Clusters {
		c.LoseQuorum(tb)
	}
}

// LoseQuorum kills a majority of the cluster's members (see
// FleetNamespace.LoseQuorum), the members the stand-in restored last
// when it was restored, and marks their pods not Ready as the kubelet
// would (MemberDown).
func (c *FleetCluster) LoseQuorum(tb testing.TB) {
	tb.Helper()
	members := c.Etcd.Members
	kill := len(members)/2 + 1
	c.Killed = nil
	for _, m := range members[:kill] {
		MemberDown(tb, context.Background(), c.admin, c.Namespace, c.Name, m)
		c.Killed = append(c.Killed, m)
	}
}

// Restored is the stand-in's newest successful restore of the cluster
// (false: none).
func (n *FleetNamespace) Restored(cluster string) (RestoreRecord, bool) {
	var best RestoreRecord
	for _, r := range n.Operator.Records() {
		if r.Cluster == cluster && r.Err == nil && !r.RunningAt.IsZero() && r.RunningAt.After(best.RunningAt) {
			best = r
		}
	}
	return best, !best.RunningAt.IsZero()
}

// Restores counts the stand-in's restores (any outcome) of the cluster.
func (n *FleetNamespace) Restores(cluster string) int {
	k := 0
	for _, r := range n.Operator.Records() {
		if r.Cluster == cluster {
			k++
		}
	}
	return k
}

// Adopt makes the stand-in's newest restore of each restored cluster the
// cluster's current members and uid (after a namespace-wide restore, so
// that LoseQuorum and the checks act on the restored members).
func (n *FleetNamespace) Adopt(tb testing.TB) {
	tb.Helper()
	for _, c := range n.Clusters {
		if r, ok := n.Restored(c.Name); ok && (len(c.Etcd.Members) == 0 || !slices.Contains(c.Etcd.Members, r.Members[0])) {
			c.Etcd = &testenv.EtcdCluster{Version: testenv.V35, Members: r.Members, PKI: c.Etcd.PKI}
			c.UID = r.NewUID
			c.Killed = nil
		}
	}
}

// StillDown checks that nothing restored the namespace: no EtcdRestore in
// it, each EtcdCluster still the one the world made (its uid), and the
// members LoseQuorum killed still dead.
func (n *FleetNamespace) StillDown(tb testing.TB, ctx context.Context, w *FleetWorld) {
	tb.Helper()
	rl, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(n.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if len(rl.Items) != 0 || len(n.Operator.Records()) != 0 {
		tb.Errorf("namespace %s: %d EtcdRestores, %d acted on: it was to be left alone", n.Name, len(rl.Items), len(n.Operator.Records()))
	}
	for _, c := range n.Clusters {
		if uid := w.EtcdClusterUID(tb, ctx, n.Name, c.Name); uid != c.UID {
			tb.Errorf("%s/%s: EtcdCluster uid %s, want %s (unchanged)", n.Name, c.Name, uid, c.UID)
		}
		for _, m := range c.Killed {
			if m.Running() {
				tb.Errorf("%s/%s: member %s runs again", n.Name, c.Name, m.Name)
			}
		}
	}
}

// EtcdClusterUID is the uid of the EtcdCluster ns/name ("" when there is
// none).
func (w *FleetWorld) EtcdClusterUID(tb testing.TB, ctx context.Context, ns, name string) types.UID {
	tb.Helper()
	ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ec.GetUID()
}

// FleetCheck is what CheckRestored found of a restored cluster.
type FleetCheck struct {
	// Revision is the restored cluster's compact revision (the backup's
	// plus the restore's bump) and Hash its HashKV there, equal on every
	// member and to the backup's bumped alike.
	Revision int64
	Hash     uint32
	// Base is the backup database's own revision.
	Base int64
}

// CheckRestored checks the cluster the stand-in restored last against the
// world's backup of it by HashKV: the backup's snapshot is read from the
// store (every checksum checked, decrypted with the world's key), bumped
// as the restore bumped it (by the restored members' compact revision
// minus the snapshot's revision, marked compacted, etcdinternals.
// BumpRevision) and hashed offline (etcdinternals.HashKV) at that compact
// revision; every restored member must be healthy, as many as the
// EtcdCluster's members, and answer HashKV with that hash there.
func (w *FleetWorld) CheckRestored(tb testing.TB, ctx context.Context, c *FleetCluster) FleetCheck {
	tb.Helper()
	n := w.Namespace(tb, c.Namespace)
	rec, ok := n.Restored(c.Name)
	if !ok {
		tb.Fatalf("%s/%s: the stand-in restored nothing", c.Namespace, c.Name)
	}
	if len(rec.Members) != len(c.Etcd.Members) && len(c.Etcd.Members) != 0 {
		tb.Errorf("%s/%s: %d restored members, want %d", c.Namespace, c.Name, len(rec.Members), len(c.Etcd.Members))
	}
	return w.checkMembers(tb, ctx, c, rec.Members)
}

func (w *FleetWorld) checkMembers(tb testing.TB, ctx context.Context, c *FleetCluster, members []*testenv.EtcdMember) FleetCheck {
	tb.Helper()
	chk, want := w.HashAgainst(tb, ctx, c, members, c.Backup)
	if want != chk.Hash {
		tb.Errorf("%s/%s: restored HashKV %d at %d, the backup %s (revision %d, bumped by %d) hashes %d", c.Namespace, c.Name,
			chk.Hash, chk.Revision, c.Backup.Name, chk.Base, chk.Revision-chk.Base, want)
	}
	return chk
}

// HashAgainst is CheckRestored's comparison of the members with a backup
// m, returned rather than judged: the members' HashKV at their compact
// revision (equal on every member, or the test fails), and the hash of
// m's snapshot bumped alike. Tests use it to show that a restore from
// another backup does not pass.
func (w *FleetWorld) HashAgainst(tb testing.TB, ctx context.Context, c *FleetCluster, members []*testenv.EtcdMember, m *catalog.Manifest) (FleetCheck, uint32) {
	tb.Helper()
	var chk FleetCheck
	for i, mb := range members {
		cli := mb.Client(tb)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cur, err := cli.HashKV(cctx, mb.ClientURL, 0)
		if err == nil && i == 0 {
			chk.Revision = cur.CompactRevision
		}
		var at *clientv3.HashKVResponse
		if err == nil {
			at, err = cli.HashKV(cctx, mb.ClientURL, chk.Revision)
		}
		cancel()
		if err != nil {
			tb.Fatalf("%s/%s: member %s: HashKV: %v", c.Namespace, c.Name, mb.Name, err)
		}
		if i == 0 {
			chk.Hash = at.Hash
		} else if at.Hash != chk.Hash || at.CompactRevision != chk.Revision {
			tb.Errorf("%s/%s: member %s hashes %d at %d (compacted at %d), member %s %d", c.Namespace, c.Name, mb.Name, at.Hash,
				chk.Revision, at.CompactRevision, members[0].Name, chk.Hash)
		}
	}
	path := w.FetchSnapshot(tb, ctx, c.Namespace, m)
	revs, err := etcdinternals.DatabaseRevisions(path)
	if err != nil {
		tb.Fatal(err)
	}
	chk.Base = revs.Revision
	if chk.Revision <= chk.Base {
		tb.Fatalf("%s/%s: the restored cluster is compacted at %d, not above the backup %s's revision %d (no bump)", c.Namespace, c.Name, chk.Revision, m.Name, chk.Base)
	}
	if _, err := etcdinternals.BumpRevision(path, uint64(chk.Revision-chk.Base), true); err != nil {
		tb.Fatal(err)
	}
	want, err := etcdinternals.HashKV(path, chk.Revision, chk.Revision)
	if err != nil {
		tb.Fatal(err)
	}
	return chk, want.Hash
}

// FetchSnapshot reads a backup's snapshot from the store into a temp file
// (every checksum checked, decrypted with the world's key) and returns its
// path.
func (w *FleetWorld) FetchSnapshot(tb testing.TB, ctx context.Context, ns string, m *catalog.Manifest) string {
	tb.Helper()
	layout := w.Namespace(tb, ns).Layout
	exp := objectio.Expect{StoredSize: m.Snapshot.StoredSize, StoredSHA256: m.Snapshot.StoredSHA256,
		RawSize: m.Snapshot.RawSize, RawSHA256: m.Snapshot.RawSHA256, Compression: m.Snapshot.Compression, Snapshot: true}
	if m.Encryption.Encrypted() {
		exp.Encrypted, exp.Identities = true, w.Key.IDs
	}
	r, err := objectio.Open(ctx, w.Store, layout.Key(m.ClusterID, m.Name, m.Snapshot.Object), exp)
	if err != nil {
		tb.Fatalf("%s: backup %s of %s: %v", ns, m.Name, m.ClusterID, err)
	}
	defer r.Close()
	path := filepath.Join(tb.TempDir(), m.ClusterID+".db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		tb.Fatalf("%s: backup %s of %s: %v", ns, m.Name, m.ClusterID, err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// DamageBackups flips a byte in the middle of the stored snapshot of every
// backup of the cluster: each fails its checksums, so a restore has no
// usable backup. It returns the damaged keys.
func (w *FleetWorld) DamageBackups(tb testing.TB, ctx context.Context, c *FleetCluster) []string {
	tb.Helper()
	layout := w.Namespace(tb, c.Namespace).Layout
	list, err := catalog.ListBackups(ctx, w.Store, layout, c.Name)
	if err != nil || len(list) == 0 {
		tb.Fatalf("%s/%s: backups %d, %v", c.Namespace, c.Name, len(list), err)
	}
	var keys []string
	for _, l := range list {
		if l.Manifest == nil {
			continue
		}
		key := layout.Key(c.Name, l.Manifest.Name, l.Manifest.Snapshot.Object)
		b := testfix.ReadObject(tb, w.Store, key)
		b[len(b)/2] ^= 0x5a
		if _, err := w.Store.Put(ctx, key, bytes.NewReader(b)); err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		tb.Fatalf("%s/%s: no committed backup to damage", c.Namespace, c.Name)
	}
	return keys
}

// FrozenStore is the world's store with every read of one cluster's
// objects frozen (faults.Stall on Get and GetRange of keys under
// "<prefix>/<cluster>/"), each read giving up after stall as the cos
// store's watchdog does (the error wraps store.ErrStalled): a store prefix
// that stopped answering. Every other call goes to the real store.
func (w *FleetWorld) FrozenStore(c *FleetCluster, stall time.Duration) *faults.Store {
	fs := faults.Wrap(w.Store)
	prefix := catalog.Layout{Prefix: c.Namespace}.RootPrefix() + c.Name + "/"
	for _, op := range []faults.Op{faults.OpGet, faults.OpGetRange} {
		fs.Inject(faults.Fault{Op: op, KeyContains: prefix, Kind: faults.Stall, Delay: stall})
	}
	return fs
}

// Stalled counts the calls of fs that a stall ended (FrozenStore).
func Stalled(fs *faults.Store) int {
	n := 0
	for _, c := range fs.Calls() {
		if c.Fault == faults.Stall {
			n++
		}
	}
	return n
}

// newAgeIdentityFile makes an age key and writes its identity to a file.
func newAgeIdentityFile(tb testing.TB) (testfix.AgeKey, string) {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	f := filepath.Join(tb.TempDir(), "identity.txt")
	if err := os.WriteFile(f, []byte(id.String()+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	ids, err := seal.ReadIdentityFile(f)
	if err != nil {
		tb.Fatal(err)
	}
	return testfix.AgeKey{IDs: ids, Pub: id.Recipient().String()}, f
}

// CustomerMaster is a real kube-apiserver playing a customer's master: it
// stores into its EtcdCluster through the NodePort (a NodePort forwarder
// on a loopback "node" IP), with the files of the cluster's client-TLS
// secret, which it keeps.
type CustomerMaster struct {
	opts testenv.KubeOptions
	K    *testenv.KubeAPIServer
	Node *NodePort
	// Want is what it served after Fill (Objects), before it stopped.
	Want map[string]string
}

// CustomerNamespace is the customer's namespace inside a customer master.
const CustomerNamespace = "shop"

// StartCustomerMaster writes the client-TLS secret's files and starts the
// customer master on the NodePort np.
func StartCustomerMaster(tb testing.TB, ctx context.Context, admin kubernetes.Interface, ns, cluster string, np *NodePort) *CustomerMaster {
	tb.Helper()
	s, err := admin.CoreV1().Secrets(ns).Get(ctx, cluster+"-client-tls", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	files := map[string]string{}
	for _, k := range []string{kube.ClientCAKey, kube.ClientCertKey, kube.ClientKeyKey} {
		files[k] = filepath.Join(dir, k)
		if err := os.WriteFile(files[k], s.Data[k], 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	cm := &CustomerMaster{Node: np, opts: testenv.KubeOptions{EtcdServers: []string{"https://" + np.Addr()}, ExtraArgs: []string{
		"--etcd-cafile=" + files[kube.ClientCAKey], "--etcd-certfile=" + files[kube.ClientCertKey], "--etcd-keyfile=" + files[kube.ClientKeyKey]}}}
	cm.Start(tb)
	return cm
}

// Start starts the customer master (again) with the same files and URL.
func (c *CustomerMaster) Start(tb testing.TB) {
	tb.Helper()
	c.K = testenv.StartKubeAPIServerWith(tb, c.opts)
}

// Stop stops it.
func (c *CustomerMaster) Stop() { c.K.Stop() }

// Fill creates the customer's namespace with n ConfigMaps and n Secrets.
func (c *CustomerMaster) Fill(tb testing.TB, ctx context.Context, n int) {
	tb.Helper()
	cs := c.K.Clientset(tb, "")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CustomerNamespace}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if _, err := cs.CoreV1().ConfigMaps(CustomerNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"i": fmt.Sprint(i), "v": strings.Repeat("x", 64+i)}}, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets(CustomerNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%03d", i)},
			Data: map[string][]byte{"token": fmt.Appendf(nil, "secret-%d", i)}}, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
}

// Objects are the names, uids and resourceVersions of the customer's
// ConfigMaps and Secrets, as its master serves them.
func (c *CustomerMaster) Objects(tb testing.TB, ctx context.Context) map[string]string {
	tb.Helper()
	cs := c.K.Clientset(tb, "")
	out := map[string]string{}
	cms, err := cs.CoreV1().ConfigMaps(CustomerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range cms.Items {
		out["ConfigMap/"+o.Name] = fmt.Sprintf("%s %s %v", o.UID, o.ResourceVersion, o.Data)
	}
	ss, err := cs.CoreV1().Secrets(CustomerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range ss.Items {
		out["Secret/"+o.Name] = fmt.Sprintf("%s %s %v", o.UID, o.ResourceVersion, o.Data)
	}
	return out
}
