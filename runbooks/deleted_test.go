package runbooks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// everyBackupDeleted: a 3-member cluster backed up twice onto a bucket
// with object lock (a 1-day GOVERNANCE default retention, as a carrier
// bucket would have); then a credential with the toolkit's rights deletes
// every object (delete markers) and writes garbage over every manifest,
// and every member is lost. The runbook lists what the versions hold,
// restores the newest backup from them, starts the members, verifies and
// takes a live backup again: every key of the newest backup is back.
func everyBackupDeleted(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	cli := c.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/pods/", 100, 200)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	f.Bucket = f.MinIO.NewLockedBucket(t)
	if _, err := f.MinIO.S3(t).PutObjectLockConfiguration(&s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(f.Bucket),
		ObjectLockConfiguration: &s3.ObjectLockConfiguration{
			ObjectLockEnabled: aws.String(s3.ObjectLockEnabledEnabled),
			Rule:              &s3.ObjectLockRule{DefaultRetention: &s3.DefaultRetention{Mode: aws.String("GOVERNANCE"), Days: aws.Int64(1)}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	f.Store = testfix.Store(t, f.MinIO, f.Bucket)
	f.Vars["bucket"] = f.Bucket
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	take := func() *catalog.Manifest {
		return f.Backup(t, ctx, c, backup.Options{V2: backup.V2Off})
	}
	first := take()
	for k, v := range testenv.PutKeys(t, cli, "/registry/secrets/", 50, 100) {
		keys[k] = v
	}
	newest := take()

	// The destructive credential: every object deleted, every manifest
	// overwritten.
	objs, err := f.Store.List(ctx, f.Layout.ClusterPrefix(f.ID))
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, o := range objs {
		all = append(all, o.Key)
	}
	if err := f.Store.Delete(ctx, all); err != nil {
		t.Fatalf("delete on a locked bucket (only adds markers): %v", err)
	}
	for _, m := range []*catalog.Manifest{first, newest} {
		if _, err := f.Store.Put(ctx, f.Layout.Key(f.ID, m.Name, catalog.ManifestObject), strings.NewReader("ransom note: pay up")); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.Members {
		m.Kill()
	}

	s := newScenario(t, rb, f.Vars)
	eps := newMembers(t, s, 3, f.ID+"-recovered", "recovered")
	rs := s.Run("backup.md#every-backup-deleted-or-overwritten")
	listed := mdblocks.One(t, rs, "etcd-recovery list --cluster-id <id> --include-deleted", 0)
	mdblocks.MustContain(t, listed, newest.Name, first.Name, "DELETED")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), newest.Name, "WARNING: the backup is deleted")
	ncli := mdblocks.ClusterAt(c.PKI, eps).Client(t)
	mdblocks.CheckKeys(t, ncli, keys)
	checkRevision(t, ncli)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery list --cluster-id", -1), "manual")
}
