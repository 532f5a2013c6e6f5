package replicate_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The S3 request classes a counter counts. COS bills PUT, POST, COPY and
// LIST as Class A, GET and HEAD as Class B.
const (
	reqPUT  = "PUT"  // PutObject, UploadPart
	reqPOST = "POST" // CreateMultipartUpload, CompleteMultipartUpload
	reqGET  = "GET"  // GetObject
	reqLIST = "LIST" // ListObjectsV2 (one page of at most 1,000 keys)
	reqHEAD = "HEAD"
	reqMore = "other" // a bucket's configuration, DELETE (never expected)
)

// reqCount is the requests and bytes of one class and category.
type reqCount struct {
	n          int64
	sent, recv int64 // request and response body bytes
}

// counter counts every HTTP request a store makes, by class and by the
// category its key (or listing prefix) falls in, with the bytes each way,
// and the time each object PUT completed (for the RPO). It wraps the
// store's transport (cos.Config.WrapTransport): it sees each S3 request
// as the server does, one per page and per part.
type counter struct {
	bucket   string
	category func(key string, list bool) string

	mu     sync.Mutex
	counts map[[2]string]*reqCount // {class, category}
	root   string                  // the prefix's root: its listings count full scans
	scans  int64
	putAt  map[string]time.Time // object key -> the PUT's completion (2xx)
}

func newCounter(bucket string, l catalog.Layout) *counter {
	return &counter{bucket: bucket, category: categorize(l), root: l.RootPrefix(), counts: map[[2]string]*reqCount{}, putAt: map[string]time.Time{}}
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper { return countingRT{c, rt} }

type countingRT struct {
	c  *counter
	rt http.RoundTripper
}

type countingBody struct {
	io.ReadCloser
	c  *counter
	rc *reqCount
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.rc.recv += int64(n)
	b.c.mu.Unlock()
	return n, err
}

func (rt countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	path := strings.TrimPrefix(req.URL.Path, "/")
	key := ""
	if b, k, ok := strings.Cut(path, "/"); ok && b == rt.c.bucket {
		key = k
	}
	q := req.URL.Query()
	class := reqMore
	list := false
	switch {
	case req.Method == http.MethodGet && key == "" && q.Has("list-type"):
		class, list, key = reqLIST, true, q.Get("prefix")
	case req.Method == http.MethodGet && key != "":
		class = reqGET
	case req.Method == http.MethodPut && key != "":
		class = reqPUT
	case req.Method == http.MethodPost && key != "":
		class = reqPOST
	case req.Method == http.MethodHead:
		class = reqHEAD
	}
	cat := "config"
	if key != "" || list {
		cat = rt.c.category(key, list)
	}
	rt.c.mu.Lock()
	if list && key == rt.c.root && q.Get("start-after") != "" && !q.Has("continuation-token") {
		rt.c.scans++
	}
	rc := rt.c.counts[[2]string{class, cat}]
	if rc == nil {
		rc = &reqCount{}
		rt.c.counts[[2]string{class, cat}] = rc
	}
	rc.n++
	if req.ContentLength > 0 {
		rc.sent += req.ContentLength
	}
	rt.c.mu.Unlock()
	resp, err := rt.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if class == reqPUT && !q.Has("partNumber") && resp.StatusCode/100 == 2 {
		rt.c.mu.Lock()
		if _, ok := rt.c.putAt[key]; !ok {
			rt.c.putAt[key] = time.Now()
		}
		rt.c.mu.Unlock()
	}
	if class == reqPOST && q.Has("uploadId") && resp.StatusCode/100 == 2 {
		// A multipart upload completes with its POST.
		rt.c.mu.Lock()
		if _, ok := rt.c.putAt[key]; !ok {
			rt.c.putAt[key] = time.Now()
		}
		rt.c.mu.Unlock()
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, c: rt.c, rc: rc}
	return resp, nil
}

// get is the count of a class and category.
func (c *counter) get(class, cat string) reqCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := c.counts[[2]string{class, cat}]; rc != nil {
		return *rc
	}
	return reqCount{}
}

// stored is when key's PUT completed (zero: not yet).
func (c *counter) stored(key string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.putAt[key]
}

// table is every class and category counted, for the benchmark's output.
func (c *counter) table(site string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys [][2]string
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][1] != keys[j][1] {
			return keys[i][1] < keys[j][1]
		}
		return keys[i][0] < keys[j][0]
	})
	var b strings.Builder
	for _, k := range keys {
		rc := c.counts[k]
		fmt.Fprintf(&b, "  %s %-6s %-10s %7d requests, %s sent, %s received\n", site, k[0], k[1], rc.n, mib(rc.sent), mib(rc.recv))
	}
	return b.String()
}

// categorize is the category of a key of a cluster prefix laid out as l
// (the primary's or the second site's): segment, record (gap, proof),
// backup (a backup folder's objects, its escrow), status (the copier's
// record), owner; for a listing: poll (a cluster's journal folder),
// backup (a manifest's key: the copier checking the second site), scan
// (the rest).
func categorize(l catalog.Layout) func(key string, list bool) string {
	return func(key string, list bool) string {
		if list {
			switch ki := l.Classify(key); {
			case strings.HasPrefix(key, l.JournalPrefix("")) && key != l.JournalPrefix(""):
				return "poll"
			case ki.Kind == catalog.KeyBackup:
				return "backup"
			default:
				return "scan"
			}
		}
		if key == l.ReplicaStatusKey() {
			return "status"
		}
		switch l.Classify(key).Kind {
		case catalog.KeyJournal:
			return "segment"
		case catalog.KeyJournalGap, catalog.KeyJournalProof:
			return "record"
		case catalog.KeyBackup, catalog.KeyEscrow:
			return "backup"
		case catalog.KeyOwnerMarker:
			return "owner"
		}
		return "other"
	}
}

// podEvents is n puts from revision first of Kubernetes-like pod objects
// (about 1.3 KiB of JSON each, random uids and container ids as real ones
// are), over 200 pods: what a cluster's journal holds.
func podEvents(rng *rand.Rand, first int64, n int) []journal.Event {
	evs := make([]journal.Event, n)
	hex := func(k int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, k)
		for i := range b {
			b[i] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	for i := range evs {
		rev := first + int64(i)
		pod := rng.IntN(200)
		name := fmt.Sprintf("web-%d-%s", pod, hex(5))
		v := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"default","uid":"%s-%s-%s-%s-%s","resourceVersion":"%d",`+
			`"labels":{"app":"web","pod-template-hash":"%s"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-%s","uid":"%s","controller":true}]},`+
			`"spec":{"nodeName":"10.%d.%d.%d","containers":[{"name":"web","image":"registry.example/web:1.%d","resources":{"requests":{"cpu":"100m","memory":"128Mi"}},`+
			`"volumeMounts":[{"name":"kube-api-access-%s","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}]}]},`+
			`"status":{"phase":"Running","podIP":"172.30.%d.%d","hostIP":"10.%d.%d.%d","startTime":"2026-11-29T10:%02d:%02dZ",`+
			`"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-29T10:%02d:%02dZ"},{"type":"ContainersReady","status":"True"}],`+
			`"containerStatuses":[{"name":"web","ready":true,"restartCount":%d,"image":"registry.example/web:1.%d","imageID":"registry.example/web@sha256:%s",`+
			`"containerID":"containerd://%s","started":true,"state":{"running":{"startedAt":"2026-11-29T10:%02d:%02dZ"}}}]}}`,
			name, hex(8), hex(4), hex(4), hex(4), hex(12), rev, hex(10), hex(10), hex(32),
			rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(20), hex(5),
			rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(60), rng.IntN(60), rng.IntN(60), rng.IntN(60),
			rng.IntN(3), rng.IntN(20), hex(64), hex(64), rng.IntN(60), rng.IntN(60))
		evs[i] = journal.Event{Rev: rev, Type: journal.Put, Key: []byte(fmt.Sprintf("/registry/pods/default/web-%d", pod)), Value: []byte(v),
			CreateRev: max(rev-int64(rng.IntN(1000)), 2), Version: int64(1 + rng.IntN(50))}
	}
	return evs
}

// segmentWriter writes one cluster's journal as the capture does, a
// segment of events every interval, with the journal's own segment writer
// (zstd, create-only), chained from base at revision baseRev.
type segmentWriter struct {
	st            store.Store
	l             catalog.Layout
	id, base      string
	next          int64
	perSegment    int
	rng           *rand.Rand
	written       int
	bytes         int64
	firstSegments []string
}

func (w *segmentWriter) write(ctx context.Context) error {
	evs := podEvents(w.rng, w.next, w.perSegment)
	last := w.next + int64(len(evs)) - 1
	now := time.Now().UnixMilli()
	h := journal.Header{Format: journal.FormatVersion, ClusterID: w.id, BaseBackup: w.base, BaseRev: 10,
		FirstRev: w.next, LastRev: last, Received: map[int64]int64{w.next: now, last: now}, Events: len(evs)}
	info, err := journal.WriteSegment(ctx, w.st, w.l, objectio.Encoding{Compression: objectio.CompressZstd}, h, evs)
	if err != nil {
		return err
	}
	w.next = last + 1
	w.written++
	w.bytes += info.Size
	return nil
}

// creds writes an access key pair as a --cos-credentials-dir.
func creds(tb testing.TB, access, secret string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, v := range map[string]string{"access_key_id": access, "secret_access_key": secret} {
		if err := os.WriteFile(dir+"/"+name, []byte(v), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// secondStoreURL is the --second-store URL of bucket/prefix on endpoint.
func secondStoreURL(bucket, prefix, endpoint, region string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s", bucket, prefix, url.QueryEscape(endpoint), region)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// quantile is the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// benchDuration is a duration from the environment, else def.
func benchDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

var _ = testfix.BenchInt
