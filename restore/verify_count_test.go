package restore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// TestVerifyCountsKeysOnLeasesByTheIndex: the verify counts the keys
// attached to a lease from etcd's index and the leases (no value read),
// through one member of three, and the key scan it falls back to counts
// the same (etcd 3.5 and 3.6). A key that names a lease its snapshot does
// not hold is attached to none by etcd's start: it never expires, so both
// the snapshot's facts and the verify count it with the keys on no lease,
// even once that lease is granted again, and its loss fails the verify
// (it was once reported as "expired with its lease"). A keyspace that
// moves under the index count is counted again; one that keeps moving, or
// an index count that fails, is counted by the scan. The report says
// which counted.
func TestVerifyCountsKeysOnLeasesByTheIndex(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			verifyCountsKeysOnLeases(t, v)
		})
	}
}

func verifyCountsKeysOnLeases(t *testing.T, v testenv.Version) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1})
	cli := c.Client(t)
	ctx := testfix.Context(t, 3*time.Minute)
	testenv.PutKeys(t, cli, "/registry/pods/", 40, 32)
	// Four leases: three with five keys each, one with none.
	var ids []clientv3.LeaseID
	for range 4 {
		g, err := cli.Grant(ctx, 3600)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	for i := range 3 {
		for k := range 5 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/registry/events/l%d-%d", i, k), "e", clientv3.WithLease(ids[i])); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The snapshot, with the third lease taken out of its lease bucket:
	// its five keys name a lease the database does not hold.
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%512 == 32 {
		data = data[:len(data)-32] // etcd's sha256 trailer: the file is edited below
	}
	if err := os.WriteFile(snap, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(snap, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		k := binary.BigEndian.AppendUint64(nil, uint64(ids[2]))
		return tx.Bucket(etcdinternals.LeaseBucket).Delete(k)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	facts, err := restore.ReadSnapshotFacts(snap)
	if err != nil {
		t.Fatal(err)
	}
	if facts.LiveKeys != 55 || facts.LeasedKeys != 15 || facts.AttachedKeys != 10 || facts.UnleasedKeys() != 45 ||
		fmt.Sprint(facts.OrphanLeases) != fmt.Sprint([]int64{int64(ids[2])}) {
		t.Fatalf("snapshot facts %+v: want 55 live keys, 15 naming a lease, 10 of them attached, 45 on no live lease, lease %x held by none", facts, int64(ids[2]))
	}

	// Three members, restored by etcdutl and started at once.
	ic, ms := newCluster(t, 3, false)
	var specs []testenv.MemberSpec
	var eps []string
	for _, m := range ms {
		dataDir := filepath.Join(dir, m.name+".etcd")
		out, err := exec.CommandContext(ctx, testenv.EtcdutlBin(t, v), "snapshot", "restore", snap, "--skip-hash-check",
			"--data-dir", dataDir, "--name", m.name, "--initial-cluster", ic, "--initial-cluster-token", "orphans",
			"--initial-advertise-peer-urls", m.peerURL).CombinedOutput()
		if err != nil {
			t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
		}
		specs = append(specs, testenv.MemberSpec{Version: v, Name: m.name, DataDir: dataDir, ClientURL: m.clientURL, PeerURL: m.peerURL,
			InitialCluster: ic, InitialClusterToken: "orphans"})
		eps = append(eps, m.clientURL)
	}
	members := testenv.StartEtcdMembers(t, specs...)
	for _, m := range members {
		m.WaitReady(t)
	}
	ncli := members[0].Client(t)

	verify := func(t *testing.T, how func(*restore.VerifyOptions)) (*restore.VerifyReport, error) {
		t.Helper()
		opts := restore.VerifyOptions{Etcd: etcdconn.Config{Endpoints: eps}, Timeout: 30 * time.Second,
			ProbeTimeout: 5 * time.Second, ExpectedMembers: 3, Log: testfix.Logger(t)}
		facts.Expect(&opts)
		if how != nil {
			how(&opts)
		}
		return restore.VerifyRebuilt(ctx, opts)
	}
	ways := []struct {
		name string
		how  func(*restore.VerifyOptions)
	}{
		{"index", nil},
		{"scan", restore.SetCountByScan},
	}
	for _, w := range ways {
		rep, err := verify(t, w.how)
		if err != nil || !rep.Verified || rep.Keys != 55 || rep.LeasedKeys != 10 || rep.UnleasedKeys != 45 || rep.CountedBy != w.name {
			t.Fatalf("%s: verify of the restored cluster: %v, report %+v; want verified by %s, 55 keys, 10 attached, 45 on no live lease", w.name, err, rep, w.name)
		}
	}

	// The keyspace moves under the index count twice (two keys the
	// snapshot does not have): counted again, and the third count stands.
	var attempts []int
	rep, err := verify(t, func(o *restore.VerifyOptions) {
		restore.SetBetweenCounts(o, func(attempt int) error {
			attempts = append(attempts, attempt)
			if attempt < 2 {
				_, err := ncli.Put(ctx, fmt.Sprintf("/registry/pods/moving-%d", attempt), "x")
				return err
			}
			return nil
		})
	})
	if err == nil || !strings.Contains(err.Error(), "47 live keys on no live lease, the snapshot has 45") || fmt.Sprint(attempts) != "[0 1 2]" ||
		rep.Keys != 57 || rep.LeasedKeys != 10 || rep.CountedBy != "index" {
		t.Fatalf("a keyspace that moved twice: attempts %v, %v, report %+v; want 3 attempts by the index, 57 keys counted and the two new ones failed", attempts, err, rep)
	}
	for _, k := range []string{"/registry/pods/moving-0", "/registry/pods/moving-1"} {
		if _, err := ncli.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	// It moves every time, or the index count fails (a lease's keys more
	// than a response carries): the scan counts it.
	for _, fail := range []bool{false, true} {
		calls := 0
		rep, err = verify(t, func(o *restore.VerifyOptions) {
			restore.SetBetweenCounts(o, func(attempt int) error {
				calls++
				if fail {
					return errors.New("grpc: received message larger than max")
				}
				_, err := ncli.Put(ctx, "/registry/pods/00000001", "moved")
				return err
			})
		})
		if want := map[bool]int{false: 3, true: 1}[fail]; err != nil || !rep.Verified || rep.Keys != 55 || rep.LeasedKeys != 10 || calls != want || rep.CountedBy != "scan" {
			t.Fatalf("failing %v: counted by %q after %d index counts (want the scan after %d): %v, report %+v", fail, rep.CountedBy, calls, want, err, rep)
		}
	}

	// The lease the snapshot did not hold is granted again, and a new key
	// put on it: the new key is attached, the five restored ones still to
	// none (etcd attaches a key on a put, never to a lease granted later).
	// Both counts agree.
	if _, err := pb.NewLeaseClient(ncli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(ids[2]), TTL: 3600}); err != nil {
		t.Fatal(err)
	}
	if _, err := ncli.Put(ctx, "/registry/events/after", "e", clientv3.WithLease(ids[2])); err != nil {
		t.Fatal(err)
	}
	for _, w := range ways {
		rep, err := verify(t, w.how)
		if err != nil || !rep.Verified || rep.Keys != 56 || rep.LeasedKeys != 11 || rep.UnleasedKeys != 45 || rep.CountedBy != w.name {
			t.Fatalf("%s: after the missing lease was granted again: %v, report %+v; want verified, 56 keys, 11 attached, 45 on none", w.name, err, rep)
		}
	}

	// A key on the lease the snapshot did not hold is lost: a failure,
	// by either count, not a lease expiry.
	if _, err := ncli.Delete(ctx, "/registry/events/l2-0"); err != nil {
		t.Fatal(err)
	}
	for _, w := range ways {
		rep, err := verify(t, w.how)
		if err == nil || !strings.Contains(err.Error(), "44 live keys on no live lease, the snapshot has 45") || rep.CountedBy != w.name {
			t.Fatalf("%s: verify after a key on no live lease was lost: %v, report %+v; want the unleased count failed", w.name, err, rep)
		}
	}
}
