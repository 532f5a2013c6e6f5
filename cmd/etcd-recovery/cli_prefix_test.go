package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Every prefix form the CLI accepts round-trips against a real MinIO: a
// backup written with it is listed (and only it) by list with any spelling
// of the same prefix; the objects sit under the normal form. The forms it
// refuses ('a//b', '.', '..') are in TestCLIUsageErrors.
func TestCLIPrefixRoundTrip(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/k/", 20, 64)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	base := testenv.Prefix(t)
	st := testfix.Store(t, m, bucket)
	ctx := context.Background()
	for _, tc := range []struct{ backupAs, listAs, stored string }{
		{"/" + base + "/a/b/", base + "/a/b", base + "/a/b/"},
		{base + "/x.y/z_1-2", "/" + base + "/x.y/z_1-2/", base + "/x.y/z_1-2/"},
		{base + "/.hidden", base + "/.hidden/", base + "/.hidden/"},
	} {
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "c1", "-o", "json"}, clusterArgs(c), cosArgs(t, m, bucket, tc.backupAs))...)
		if code != 0 {
			t.Fatalf("backup --prefix %q: exit %d\n%s\n%s", tc.backupAs, code, out, errOut)
		}
		var man struct{ Name string }
		if err := json.Unmarshal([]byte(out), &man); err != nil {
			t.Fatalf("backup -o json: %v\n%s", err, out)
		}
		for _, k := range testfix.Keys(t, st, base+"/") {
			if strings.Contains(k, "/"+man.Name+"/") && !strings.HasPrefix(k, tc.stored+"c1/"+man.Name+"/") {
				t.Errorf("backup --prefix %q stored %s, want it under %s", tc.backupAs, k, tc.stored)
			}
		}
		code, js, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "c1", "-o", "json"}, cosArgs(t, m, bucket, tc.listAs))...)
		if code != 0 {
			t.Fatalf("list --prefix %q: exit %d\n%s", tc.listAs, code, errOut)
		}
		var rows []struct{ Name, Status string }
		if err := json.Unmarshal([]byte(js), &rows); err != nil {
			t.Fatalf("list -o json: %v\n%s", err, js)
		}
		if len(rows) != 1 || rows[0].Name != man.Name || rows[0].Status != "committed" {
			t.Errorf("list --prefix %q after backup --prefix %q: %+v, want only %s committed", tc.listAs, tc.backupAs, rows, man.Name)
		}
	}
}
