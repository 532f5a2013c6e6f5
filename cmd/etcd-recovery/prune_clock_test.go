package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// storeClockBehind points the rig's CLI flags at a proxy in front of its
// MinIO whose answers carry a Date header behind by d: to the CLI, its
// node's clock is d ahead of the store's.
func (r *pruneRig) storeClockBehind(t *testing.T, d time.Duration) {
	t.Helper()
	target, err := url.Parse(r.minio.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Set("Date", time.Now().Add(-d).UTC().Format(http.TimeFormat))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	i := slices.Index(r.flags, "--cos-endpoint")
	r.flags = slices.Clone(r.flags)
	r.flags[i+1] = srv.URL
}

// prune on a node whose clock is 25 hours ahead of the store's: the CLI
// checks the clock by default and refuses, naming the clock; the young
// incomplete folder (abandoned, at the node's clock) is still there.
func TestPruneCommandRefusesNodeClockAhead(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	r.fixture(t, "clk")
	// A folder in flight, written now: at the node's clock, 25 hours old.
	inflight := r.put(t, "clk", time.Now().UTC(), catalog.KindScheduled, false)
	r.storeClockBehind(t, 25*time.Hour)
	before := testfix.Keys(t, r.store, "")
	code, _, errOut := r.run(t, "prune", "--cluster-id", "clk")
	if code == 0 {
		t.Fatal("prune on a node 25h ahead of the store succeeded")
	}
	for _, want := range []string{"check the clock", "cluster clk", "ahead of the store", "NTP"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if after := testfix.Keys(t, r.store, ""); !slices.Equal(after, before) {
		t.Errorf("a refused prune deleted %d objects", len(before)-len(after))
	}
	if !slices.ContainsFunc(before, func(k string) bool { return strings.Contains(k, "/"+inflight+"/") }) {
		t.Errorf("the in-flight folder %s is not in the bucket", inflight)
	}
}

// backup --prune on a node 25 hours ahead of the store: the backup is
// committed, the prune that follows refuses (exit non-zero, naming the
// clock) and the older backups are all still there.
func TestBackupPruneCommandRefusesNodeClockAhead(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	r := newPruneRig(t)
	now := time.Now().UTC()
	for i := range 4 {
		r.put(t, "bpclk", now.Add(-time.Duration(i+1)*time.Minute), catalog.KindScheduled, true)
	}
	r.storeClockBehind(t, 25*time.Hour)
	before := testfix.Keys(t, r.store, "")
	args := []string{"--cluster-id", "bpclk", "--kind", "scheduled", "--v2", "off", "--prune", "--keep-anchors", "0", "--keep-recent", "1"}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	code, _, errOut := r.run(t, "backup", args...)
	if code == 0 {
		t.Fatal("backup --prune on a node 25h ahead of the store succeeded")
	}
	for _, want := range []string{"was committed", "check the clock", "cluster bpclk", "NTP"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	after := testfix.Keys(t, r.store, "")
	for _, k := range before {
		if !slices.Contains(after, k) {
			t.Errorf("%s was deleted by a refused prune", k)
		}
	}
	if len(after) <= len(before) {
		t.Errorf("the backup was not committed: %d objects before, %d after", len(before), len(after))
	}
}
