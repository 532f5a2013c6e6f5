package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// prune exits 1, naming the key and counting it in -o json, when a
// staged plaintext copy older than an hour cannot be deleted. The store is
// a real MinIO behind a loopback proxy that stands for a store refusing
// the delete (a bucket policy, an object lock): it answers AccessDenied to
// the DeleteObjects request naming the staged key, and dates every listed
// object 2 h back (a copy left by a killed restore).
func TestPruneCommandStagedCopyLeftFails(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	layout := catalog.Layout{Prefix: prefix}
	st := testfix.Store(t, m, bucket)
	key := layout.StagedKey("stuck", "20261122T112102.831Z-scheduled-0a1b2c3d")
	if _, err := st.Put(context.Background(), key, strings.NewReader("plaintext snapshot")); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour).UTC().Format("2006-01-02T15:04:05.000Z")
	lastModified := regexp.MustCompile(`<LastModified>[^<]*</LastModified>`)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Request.URL.RawQuery, "list-type") {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		b = lastModified.ReplaceAll(b, []byte("<LastModified>"+old+"</LastModified>"))
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, del := r.URL.Query()["delete"]; del && r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(key)) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cos := []string{"--cos-endpoint", srv.URL, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
		"--cos-credentials-dir", credsDir(t, m.AccessKey, m.SecretKey), "--cos-max-retries", "0"}

	for _, args := range [][]string{{"prune", "--cluster-id", "stuck"}, {"prune", "--all-cluster-ids"}} {
		code, out, errOut := runCtx(t, context.Background(), concatArgs(args, []string{"-o", "json"}, cos)...)
		if code != exitFailure || !strings.Contains(errOut, key) || !strings.Contains(errOut, "could not be deleted") {
			t.Fatalf("%v: exit %d, want %d naming %s\nstderr:\n%s", args, code, exitFailure, key, lastLinesOf(errOut, 10))
		}
		var rep prune.PruneReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v -o json: %v\n%s", args, err, out)
		}
		if rep.StagedFailed != 1 || len(rep.Staged) != 1 || rep.Staged[0].Key != key || rep.Staged[0].Action != catalog.StagedFailed {
			t.Fatalf("%v -o json: stagedFailed %d, staged %+v; want the copy counted as FAILED", args, rep.StagedFailed, rep.Staged)
		}
	}
	if got := testfix.Keys(t, st, layout.StagedPrefix("")); len(got) != 1 {
		t.Fatalf("staged copies %v, want the one the store refused to delete", got)
	}
}
