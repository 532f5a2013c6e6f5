package undelete

import (
	"cmp"
	"log/slog"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Defaults.
const (
	// DefaultMaxTxnOps is etcd's default --max-txn-ops: a transaction of
	// more compares or operations is refused (a batch is halved then).
	DefaultMaxTxnOps = 128
	// DefaultMaxTxnBytes bounds the keys and values of one transaction,
	// under etcd's default --max-request-bytes (1.5 MiB).
	DefaultMaxTxnBytes = 1 << 20
	// DefaultRequestTimeout bounds each request to the live cluster.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultSettle is the CLI's --settle: longer than the garbage
	// collector and the namespace controller take to act on an object
	// they watch.
	DefaultSettle = 10 * time.Second
	// DefaultKubePrefix is kube-apiserver's default --etcd-prefix.
	DefaultKubePrefix = "/registry"
)

// Options are an undelete's.
type Options struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Site names the store when it is not the primary (as
	// restore.Options.Site): it is in the result and the record.
	Site string
	// Etcd is the live cluster the keys are written back into.
	Etcd etcdconn.Config

	// Prefixes (--key-prefix) are raw key prefixes: a key starting with one
	// is considered ("/registry/namespaces/ns1" also matches ns10).
	Prefixes []string
	// Namespaces (--kube-namespace) each select exactly the namespace object
	// <KubePrefix>/namespaces/NS and every namespaced object of NS: keys
	// <KubePrefix>/<resource>/NS/<name> and
	// <KubePrefix>/<group>/<resource>/NS/<name>, custom resources
	// included. At least one of Prefixes and Namespaces.
	Namespaces []string
	// KubePrefix (--kube-prefix) is kube-apiserver's --etcd-prefix
	// (DefaultKubePrefix when empty).
	KubePrefix string

	// ToRevision or ToTime (one) is the point the keys come back from:
	// a revision before the delete (journal find shows it).
	ToRevision int64
	ToTime     time.Time
	// AcceptUnprovenJournal replays the journal even through a window
	// whose journal proof failed (as restore's --accept-unproven-journal).
	AcceptUnprovenJournal bool
	// AcceptTerminating writes back Kubernetes objects whose value at the
	// point already has a deletionTimestamp. Without it such a point is
	// refused before anything is written: the namespace controller (or
	// the garbage collector) would delete them again at once.
	AcceptTerminating bool
	// AcceptOtherCluster skips the check that the live cluster is the one
	// the journal watches (the etcd cluster ID of its newest segment).
	AcceptOtherCluster bool
	// Replace also writes keys that exist now with other bytes than at
	// the point, each guarded by the revision read: a key changed again
	// since it was read is left alone.
	Replace bool
	// DryRun reads everything and writes nothing: not the cluster, not a
	// record.
	DryRun bool

	Identities *seal.Identities
	// ScratchDir holds the database at the point while its keys are read
	// (os.TempDir() when empty); removed before Run returns.
	ScratchDir string

	// MaxTxnOps and MaxTxnBytes bound each transaction
	// (DefaultMaxTxnOps, DefaultMaxTxnBytes when 0).
	MaxTxnOps   int
	MaxTxnBytes int
	// RequestTimeout bounds each request to the live cluster.
	RequestTimeout time.Duration
	// Settle, when Kubernetes objects were written, is how long the run
	// waits before it reads them back once more (0: not again): a
	// controller that deletes them again (the namespace controller, the
	// garbage collector) is seen, and the run fails. The CLI's default is
	// DefaultSettle.
	Settle time.Duration

	// Operator is who runs it, and Host where (recorded).
	Operator string
	Host     string

	Log *slog.Logger
	Now func() time.Time
}

// Validate checks the options before anything is contacted. Its errors
// are usage errors.
func (o Options) Validate() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	if len(o.Prefixes) == 0 && len(o.Namespaces) == 0 {
		return usage.Errorf("undelete: give what comes back: --kube-namespace NS or --key-prefix P (both repeatable)")
	}
	for _, p := range o.Prefixes {
		if p == "" {
			return usage.Errorf("undelete: --key-prefix is empty (every key of the cluster is never a sensible undelete; give the keys' prefix)")
		}
	}
	for _, ns := range o.Namespaces {
		if ns == "" || strings.Contains(ns, "/") {
			return usage.Errorf("undelete: --kube-namespace %q is not a namespace name", ns)
		}
	}
	if kp := o.KubePrefix; kp != "" && (!strings.HasPrefix(kp, "/") || strings.HasSuffix(kp, "/")) {
		return usage.Errorf("undelete: --kube-prefix %q: want kube-apiserver's --etcd-prefix, as /registry", kp)
	}
	switch {
	case o.ToRevision < 0:
		return usage.Errorf("undelete: --to-revision must be a revision (positive)")
	case o.ToRevision > 0 && !o.ToTime.IsZero():
		return usage.Errorf("undelete: --to-revision and --to-time: give one")
	case o.ToRevision == 0 && o.ToTime.IsZero():
		return usage.Errorf("undelete: give the point before the delete: --to-revision R or --to-time T (journal find shows it)")
	}
	if o.MaxTxnOps < 0 || o.MaxTxnBytes < 0 || o.RequestTimeout < 0 || o.Settle < 0 {
		return usage.Errorf("undelete: --max-txn-ops, --max-txn-bytes, --settle and the request timeout must be positive")
	}
	if o.Store == nil {
		return usage.Errorf("undelete: no store")
	}
	if err := o.Etcd.Validate(); err != nil {
		return usage.Wrap(err)
	}
	return nil
}

func (o *Options) defaults() {
	o.KubePrefix = cmp.Or(o.KubePrefix, DefaultKubePrefix)
	o.MaxTxnOps = cmp.Or(o.MaxTxnOps, DefaultMaxTxnOps)
	o.MaxTxnBytes = cmp.Or(o.MaxTxnBytes, DefaultMaxTxnBytes)
	o.RequestTimeout = cmp.Or(o.RequestTimeout, DefaultRequestTimeout)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// matcher is the keys an undelete considers.
type matcher struct {
	prefixes   [][]byte
	namespaces map[string]bool
	kube       string // KubePrefix + "/"
	nsKeys     map[string]bool
}

func newMatcher(o Options) *matcher {
	m := &matcher{kube: o.KubePrefix + "/", namespaces: map[string]bool{}, nsKeys: map[string]bool{}}
	for _, p := range o.Prefixes {
		m.prefixes = append(m.prefixes, []byte(p))
	}
	for _, ns := range o.Namespaces {
		m.namespaces[ns] = true
		m.nsKeys[m.kube+"namespaces/"+ns] = true
	}
	return m
}

// match: a prefix's key, a namespace object's key, or a namespaced
// object's key (<kube>/<resource>/<ns>/<name> or
// <kube>/<group>/<resource>/<ns>/<name>) of one of the namespaces.
func (m *matcher) match(key []byte) bool {
	for _, p := range m.prefixes {
		if len(key) >= len(p) && string(key[:len(p)]) == string(p) {
			return true
		}
	}
	if len(m.namespaces) == 0 {
		return false
	}
	k := string(key)
	if m.nsKeys[k] {
		return true
	}
	rest, ok := strings.CutPrefix(k, m.kube)
	if !ok {
		return false
	}
	ns, ok := kubeNamespaceOf(strings.Split(rest, "/"))
	return ok && m.namespaces[ns]
}
