package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/backup"
)

// OperatorRestoreOptions configure RequestOperatorRestore: a restore of an
// EtcdCluster done by etcd-operator's restore operator (an EtcdRestore
// object), from one of our backups.
type OperatorRestoreOptions struct {
	Kube    *Client
	Cluster string // the EtcdCluster; also the cluster id in COS
	// Backup is the backup's name; default the newest committed one.
	Backup string
	Store  backup.Store
	Layout backup.Layout
	// Bucket and Endpoint are what the operator is told (spec.s3.path is
	// "<bucket>/<key>").
	Bucket   string
	Endpoint string
	// AWSSecret is the secret the operator reads S3 credentials from, in
	// etcd-operator's format (files "credentials" and "config"); default
	// cos-credentials.
	AWSSecret      string
	ForcePathStyle bool
}

// OperatorRestoreResult is the EtcdRestore that was created.
type OperatorRestoreResult struct {
	Restore string `json:"restore"` // EtcdRestore name (= the cluster's)
	Backup  string `json:"backup"`
	S3Path  string `json:"s3Path"`
	// Staged: the backup is compressed, which etcd-operator can't read, so
	// its raw snapshot (etcdctl's format: database + sha256) was written,
	// verified, as snapshot.db in the backup's own folder (removed with the
	// backup by retention).
	Staged bool `json:"staged"`
}

// RequestOperatorRestore asks etcd-operator to restore the EtcdCluster
// from a backup: it checks that the EtcdCluster exists (the restore
// operator uses its spec as the template and replaces it), makes the
// snapshot readable by the operator (uncompressed), and creates the
// EtcdRestore. It does not wait for the operator.
func RequestOperatorRestore(ctx context.Context, o OperatorRestoreOptions) (*OperatorRestoreResult, error) {
	k := o.Kube
	if k == nil || o.Store == nil || o.Bucket == "" || o.Cluster == "" {
		return nil, errors.New("operator restore: need the kubernetes client, the cluster, the store and the bucket")
	}
	if o.AWSSecret == "" {
		o.AWSSecret = COSSecretName
	}
	if _, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &NotFoundError{Namespace: k.Namespace, Name: o.Cluster}
		}
		return nil, fmt.Errorf("reading etcdcluster %s/%s: %w", k.Namespace, o.Cluster, err)
	}
	list, err := backup.ListBackups(ctx, o.Store, o.Layout, o.Cluster)
	if err != nil {
		return nil, fmt.Errorf("listing the backups of %s: %w", o.Cluster, err)
	}
	var m *backup.Manifest
	for _, l := range list { // newest first
		if l.Manifest != nil && (o.Backup == "" || l.Name == o.Backup) {
			m = l.Manifest
			break
		}
	}
	if m == nil {
		if o.Backup != "" {
			return nil, fmt.Errorf("no committed backup %s of cluster %s", o.Backup, o.Cluster)
		}
		return nil, fmt.Errorf("no committed backup of cluster %s", o.Cluster)
	}
	res := &OperatorRestoreResult{Restore: o.Cluster, Backup: m.Name}
	key := o.Layout.Key(o.Cluster, m.Name, m.Snapshot.Object)
	if m.Snapshot.Compression != backup.CompressNone {
		key = o.Layout.Key(o.Cluster, m.Name, backup.SnapshotObjectRaw)
		if err := stageRaw(ctx, o, m, key); err != nil {
			return nil, err
		}
		res.Staged = true
	}
	res.S3Path = path.Join(o.Bucket, key)
	er := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion,
		"kind":       "EtcdRestore",
		"metadata": map[string]any{
			"name":      o.Cluster,
			"namespace": k.Namespace,
			"labels":    map[string]any{"app.kubernetes.io/managed-by": "etcd-recovery", LabelCluster: o.Cluster},
			"annotations": map[string]any{
				"etcd-recovery.armada.ibm.com/backup":   m.Name,
				"etcd-recovery.armada.ibm.com/revision": fmt.Sprint(m.RevisionBefore),
			},
		},
		"spec": map[string]any{
			"etcdCluster":       map[string]any{"name": o.Cluster},
			"backupStorageType": "S3",
			"s3": map[string]any{
				"path":           res.S3Path,
				"awsSecret":      o.AWSSecret,
				"endpoint":       o.Endpoint,
				"forcePathStyle": o.ForcePathStyle,
			},
		},
	}}
	if _, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Create(ctx, er, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating etcdrestore %s/%s: %w", k.Namespace, o.Cluster, err)
	}
	return res, nil
}

// stageRaw writes the decompressed snapshot stream to key, checking the
// database's sha256 against the manifest on the way; on a mismatch the
// staged object is removed.
func stageRaw(ctx context.Context, o OperatorRestoreOptions, m *backup.Manifest, key string) error {
	src := o.Layout.Key(o.Cluster, m.Name, m.Snapshot.Object)
	rc, err := o.Store.Get(ctx, src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	defer rc.Close()
	dec, err := backup.Decoder(rc, m.Snapshot.Compression)
	if err != nil {
		return err
	}
	defer dec.Close()
	h := &dbHasher{h: sha256.New()}
	if _, err := o.Store.Put(ctx, key, io.TeeReader(dec, h)); err != nil {
		return fmt.Errorf("staging %s: %w", key, err)
	}
	got := hex.EncodeToString(h.h.Sum(nil))
	if !strings.EqualFold(got, m.Snapshot.RawSHA256) || h.n != m.Snapshot.RawSize {
		_ = o.Store.Delete(context.WithoutCancel(ctx), []string{key})
		return fmt.Errorf("staged snapshot %s: database sha256 %s (%d bytes), manifest says %s (%d bytes)", key, got, h.n, m.Snapshot.RawSHA256, m.Snapshot.RawSize)
	}
	return nil
}

// dbHasher hashes a snapshot stream without its trailing 32-byte sha256.
type dbHasher struct {
	h    hash.Hash
	tail []byte
	n    int64
}

func (d *dbHasher) Write(p []byte) (int, error) {
	d.tail = append(d.tail, p...)
	if over := len(d.tail) - sha256.Size; over > 0 {
		d.h.Write(d.tail[:over])
		d.n += int64(over)
		d.tail = append(d.tail[:0], d.tail[over:]...)
	}
	return len(p), nil
}
