package restore_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// TestVerifyCountsKeysOnLeasesByTheIndex: the verify counts the keys
// attached to a lease from etcd's index and the leases (no value read),
// and the key scan it falls back to counts the same. A key that names a
// lease its snapshot does not hold is attached to none by etcd's start:
// it never expires, so both the snapshot's facts and the verify count it
// with the keys on no lease, and its loss fails the verify (it was once
// reported as "expired with its lease"). A keyspace that moves under the
// index count is counted again.
func TestVerifyCountsKeysOnLeasesByTheIndex(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
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
	if facts.LiveKeys != 55 || facts.LeasedKeys != 15 || facts.AttachedKeys != 10 || facts.UnleasedKeys() != 45 {
		t.Fatalf("snapshot facts %+v: want 55 live keys, 15 naming a lease, 10 of them attached, 45 on no live lease", facts)
	}

	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	dataDir := filepath.Join(dir, "r0.etcd")
	out, err := exec.CommandContext(ctx, testenv.EtcdutlBin(t, testenv.V35), "snapshot", "restore", snap, "--skip-hash-check",
		"--data-dir", dataDir, "--name", "r0", "--initial-cluster", "r0="+peer, "--initial-cluster-token", "orphans",
		"--initial-advertise-peer-urls", peer).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	ncli := testfix.StartRestoredMember(t, dataDir, "orphans", client, peer)

	verify := func(t *testing.T, how func(*restore.VerifyOptions)) (*restore.VerifyReport, error) {
		t.Helper()
		opts := restore.VerifyOptions{Etcd: etcdconn.Config{Endpoints: []string{client}}, Timeout: 30 * time.Second,
			ProbeTimeout: 5 * time.Second, ExpectedMembers: 1, Log: testfix.Logger(t)}
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
		if err != nil || !rep.Verified || rep.Keys != 55 || rep.LeasedKeys != 10 || rep.UnleasedKeys != 45 {
			t.Fatalf("%s: verify of the restored member: %v, report %+v; want verified, 55 keys, 10 attached, 45 on no live lease", w.name, err, rep)
		}
	}

	// The keyspace moves under the index count twice (two keys the
	// snapshot does not have): counted again, and the third count stands.
	var attempts []int
	rep, err := verify(t, func(o *restore.VerifyOptions) {
		restore.SetBetweenCounts(o, func(attempt int) {
			attempts = append(attempts, attempt)
			if attempt < 2 {
				if _, err := ncli.Put(ctx, fmt.Sprintf("/registry/pods/moving-%d", attempt), "x"); err != nil {
					t.Error(err)
				}
			}
		})
	})
	if err == nil || !strings.Contains(err.Error(), "47 live keys without a lease, the snapshot has 45") || fmt.Sprint(attempts) != "[0 1 2]" ||
		rep.Keys != 57 || rep.LeasedKeys != 10 {
		t.Fatalf("a keyspace that moved twice: attempts %v, %v, report %+v; want 3 attempts, 57 keys counted and the two new ones failed", attempts, err, rep)
	}
	for _, k := range []string{"/registry/pods/moving-0", "/registry/pods/moving-1"} {
		if _, err := ncli.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	// It moves every time: the scan counts it.
	calls := 0
	rep, err = verify(t, func(o *restore.VerifyOptions) {
		restore.SetBetweenCounts(o, func(attempt int) {
			calls++
			if _, err := ncli.Put(ctx, "/registry/pods/00000001", "moved"); err != nil {
				t.Error(err)
			}
		})
	})
	if err != nil || !rep.Verified || rep.Keys != 55 || rep.LeasedKeys != 10 || calls != 3 {
		t.Fatalf("a keyspace that kept moving, counted by the scan after %d index counts: %v, report %+v", calls, err, rep)
	}

	// A key on the lease the snapshot does not hold is lost: a failure,
	// by either count, not a lease expiry.
	if _, err := ncli.Delete(ctx, "/registry/events/l2-0"); err != nil {
		t.Fatal(err)
	}
	for _, w := range ways {
		rep, err := verify(t, w.how)
		if err == nil || !strings.Contains(err.Error(), "44 live keys without a lease, the snapshot has 45") {
			t.Fatalf("%s: verify after a key on no live lease was lost: %v, report %+v; want the unleased count failed", w.name, err, rep)
		}
	}
}
