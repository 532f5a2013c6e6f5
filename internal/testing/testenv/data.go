package testenv

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	putBatchOps   = 128     // etcd's default --max-txn-ops
	putBatchBytes = 1 << 20 // well under etcd's default --max-request-bytes (1.5 MiB)
)

// valueAlphabet has 64 symbols so that a random byte maps to one uniformly.
const valueAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// valueGen makes random printable values, never the same one twice.
type valueGen struct {
	rng  *rand.ChaCha8
	seen map[string]bool
}

func newValueGen() *valueGen {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic(err)
	}
	return &valueGen{rng: rand.NewChaCha8(seed), seen: map[string]bool{}}
}

func (g *valueGen) next(size int) string {
	b := make([]byte, size)
	for {
		_, _ = g.rng.Read(b)
		for i := range b {
			b[i] = valueAlphabet[b[i]&63]
		}
		if s := string(b); !g.seen[s] {
			g.seen[s] = true
			return s
		}
	}
}

// canHold reports whether size-byte values can take n distinct values
// without the generator spinning for long.
func canHoldDistinct(n, size int) bool {
	return float64(size)*6 >= math.Log2(float64(n))+8 || size >= 11
}

// PutKeys writes n keys <prefix><8-digit index> with distinct random
// printable values of valueSize bytes (32 when valueSize <= 0), in
// transactions of up to 128 puts, and returns key -> value.
func PutKeys(tb testing.TB, cli *clientv3.Client, prefix string, n, valueSize int) map[string]string {
	tb.Helper()
	if valueSize <= 0 {
		valueSize = 32
	}
	if n > 1 && !canHoldDistinct(n, valueSize) {
		tb.Fatalf("testenv: PutKeys: %d-byte values are too short for %d distinct values", valueSize, n)
	}
	gen := newValueGen()
	written := make(map[string]string, n)
	var ops []clientv3.Op
	var batchBytes int
	var batchKV [][2]string
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if err := commitWithRetry(cli, ops); err != nil {
			tb.Fatalf("testenv: PutKeys: txn of %d puts: %v", len(ops), err)
		}
		for _, kv := range batchKV {
			written[kv[0]] = kv[1]
		}
		ops, batchKV, batchBytes = ops[:0], batchKV[:0], 0
	}
	for i := range n {
		k := fmt.Sprintf("%s%08d", prefix, i)
		v := gen.next(valueSize)
		if len(ops) >= putBatchOps || (len(ops) > 0 && batchBytes+len(k)+len(v) > putBatchBytes) {
			flush()
		}
		ops = append(ops, clientv3.OpPut(k, v))
		batchKV = append(batchKV, [2]string{k, v})
		batchBytes += len(k) + len(v)
	}
	flush()
	return written
}

// commitWithRetry commits a Txn of puts, retrying transient failures (no
// leader, leader changed, proposal timed out: a proposal forwarded to a
// leader that just died is dropped and only times out after ~7s) for up to
// 45s. Re-putting the same values is harmless.
func commitWithRetry(cli *clientv3.Client, ops []clientv3.Op) error {
	deadline := time.Now().Add(45 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err == nil || !transientEtcdError(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func transientEtcdError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// V2KeyTTL is the TTL (seconds) of the one key PutV2Keys writes with a TTL.
const V2KeyTTL = 3600

// PutV2Keys writes n keys through the v2 HTTP API of a cluster started with
// EnableV2, under a fresh root directory, spread over nested directories
// (/testenv-<random>/d<i>/s<j>/k<index>); the first key has a TTL of
// V2KeyTTL seconds. It returns key (full v2 path, leading "/") -> value.
func PutV2Keys(tb testing.TB, c *EtcdCluster, n int) map[string]string {
	tb.Helper()
	if !c.Options.EnableV2 {
		tb.Fatalf("testenv: PutV2Keys on a cluster started without EnableV2")
	}
	hc := V2HTTPClient(c)
	defer hc.CloseIdleConnections()
	root := "/testenv-" + randHex(4)
	gen := newValueGen()
	type item struct{ key, value string }
	items := make([]item, n)
	for i := range items {
		items[i] = item{
			key:   fmt.Sprintf("%s/d%d/s%d/k%05d", root, i%4, (i/4)%3, i),
			value: gen.next(24),
		}
	}
	eps := c.Endpoints()
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for w := range min(8, max(n, 1)) {
		wg.Go(func() {
			for i := range work {
				form := url.Values{"value": {items[i].value}}
				if i == 0 {
					form.Set("ttl", fmt.Sprint(V2KeyTTL))
				}
				err := v2Put(hc, eps[(w+i)%len(eps)], items[i].key, form)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range items {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		tb.Fatalf("testenv: PutV2Keys: %v", firstErr)
	}
	out := make(map[string]string, n)
	for _, it := range items {
		out[it.key] = it.value
	}
	return out
}

// V2HTTPClient returns an HTTP client for the cluster's v2 API (with the
// cluster's client TLS config when TLS is on).
func V2HTTPClient(c *EtcdCluster) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: c.TLS(), MaxIdleConnsPerHost: 16},
	}
}

func v2Put(hc *http.Client, endpoint, key string, form url.Values) error {
	req, err := http.NewRequest(http.MethodPut, endpoint+"/v2/keys"+key, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("PUT %s: %w", key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("PUT %s via %s: %s: %s", key, endpoint, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// V2Node is a node as returned by the v2 keys API.
type V2Node struct {
	Key           string    `json:"key"`
	Value         string    `json:"value"`
	Dir           bool      `json:"dir"`
	TTL           int64     `json:"ttl"`
	Expiration    string    `json:"expiration"`
	Nodes         []*V2Node `json:"nodes"`
	CreatedIndex  uint64    `json:"createdIndex"`
	ModifiedIndex uint64    `json:"modifiedIndex"`
}

// GetV2Key reads key (full v2 path) through the v2 HTTP API of the cluster's
// first running member, with a quorum read.
func GetV2Key(tb testing.TB, c *EtcdCluster, key string) *V2Node {
	tb.Helper()
	hc := V2HTTPClient(c)
	defer hc.CloseIdleConnections()
	ep := ""
	for _, m := range c.Members {
		if m.Running() {
			ep = m.ClientURL
			break
		}
	}
	if ep == "" {
		tb.Fatalf("testenv: GetV2Key: no running member")
	}
	resp, err := hc.Get(ep + "/v2/keys" + key + "?quorum=true")
	if err != nil {
		tb.Fatalf("testenv: GET v2 %s: %v", key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("testenv: GET v2 %s: %s: %s", key, resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		Node *V2Node `json:"node"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Node == nil {
		tb.Fatalf("testenv: GET v2 %s: bad response %q: %v", key, body, err)
	}
	return r.Node
}
