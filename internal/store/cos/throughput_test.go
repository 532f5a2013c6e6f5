package cos_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// trickleRate is what the proxy lets through in the throughput tests:
// 2 KiB every 100 ms (about 20 KiB/s), never silent for long, so the
// no-progress rule (a 60 s stall timeout here) never fires.
const (
	trickleBytes = 2 << 10
	trickleEvery = 100 * time.Millisecond
)

// minRate is the rule under test: 256 KiB in any 5 s of transfer, about
// 2.5 times what the trickle moves in 5 s.
var minRate = cos.Throughput{Bytes: 256 << 10, Window: 5 * time.Second}

// trickleStore is a Store on r's bucket through a real TCP proxy in front
// of the MinIO, with the minimum-throughput rule and a long stall timeout.
func trickleStore(tb testing.TB, r *rig) (*cos.Store, *testenv.FaultProxy) {
	tb.Helper()
	p := testenv.StartFaultProxy(tb, strings.TrimPrefix(r.m.Endpoint, "http://"))
	s := newStore(tb, r.m, r.bucket, func(c *cos.Config) {
		c.Endpoint = p.URL("http")
		c.StallTimeout = time.Minute
		c.MinThroughput = minRate
	})
	return s, p
}

// throughputBound is how long a trickled call may take before it must
// have failed: the window, one check interval, and slack for two busy
// cores. Without the rule it would run for minutes (12 MiB at 20 KiB/s).
const throughputBound = 5*time.Second + 1250*time.Millisecond + stallSlack

func assertSlowStall(tb testing.TB, what string, err error, took time.Duration) {
	tb.Helper()
	if !errors.Is(err, store.ErrStalled) || !strings.Contains(err.Error(), "object store stalled (throughput ") ||
		!strings.Contains(err.Error(), "below the minimum 256KiB/5s") {
		tb.Fatalf("%s through a trickling store: %v (after %v): want object store stalled (throughput … below the minimum 256KiB/5s)", what, err, took)
	}
}

// An upload through a store that trickles 20 KiB/s (a few bytes every
// 100 ms: the no-progress rule never fires) fails as stalled, by the
// minimum-throughput rule, within the window plus slack, and its
// multipart upload is aborted. (That healthy calls pass the rule is shown
// by every other test of the store: they run under its default,
// 64 KiB/60s. A window of a few seconds is for trickles only: MinIO on two
// busy cores has stopped reading a part for 5 s under the race detector.)
func TestMinThroughputUpload(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	s, p := trickleStore(t, r)
	const size = 12 * mib // three 5 MiB parts, more than loopback's socket buffers hold

	key := r.prefix + "trickled.bin"
	p.SetTrickle(testenv.ToServer, trickleBytes, trickleEvery)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.Put(ctx, key, randBody(2, size))
	took := time.Since(start)
	assertSlowStall(t, "put", err, took)
	if !strings.HasPrefix(err.Error(), "cos: put "+key+": ") {
		t.Errorf("the error does not name the operation and key: %v", err)
	}
	// The abort of the multipart upload comes after the verdict and gets
	// its own window (30 s).
	if took > throughputBound+30*time.Second {
		t.Errorf("the trickled put failed after %v, want within %v", took, throughputBound+30*time.Second)
	}
	p.SetTrickle(testenv.ToServer, 0, 0)
	assertNoObject(t, r, key)
	assertNoUploads(t, r, key)
}

// A download through a store that trickles 20 KiB/s fails as stalled by
// the minimum-throughput rule within the window plus slack: a restore's
// download is bounded too.
func TestMinThroughputDownload(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	key := r.prefix + "body.bin"
	const size = 12 * mib
	if _, err := r.store.Put(testCtx(t), key, randBody(3, size)); err != nil {
		t.Fatal(err)
	}
	s, p := trickleStore(t, r)
	p.SetTrickle(testenv.ToClient, trickleBytes, trickleEvery)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	rc, err := s.Get(ctx, key)
	if err == nil {
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
	}
	took := time.Since(start)
	assertSlowStall(t, "get", err, took)
	if !strings.Contains(err.Error(), "cos: get "+key+": ") {
		t.Errorf("the error does not name the operation and key: %v", err)
	}
	if took > throughputBound {
		t.Errorf("the trickled get failed after %v, want within %v", took, throughputBound)
	}
}

func TestParseThroughput(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]cos.Throughput{
		"64KiB/60s": {Bytes: 64 << 10, Window: time.Minute},
		"1MiB/2m":   {Bytes: 1 << 20, Window: 2 * time.Minute},
		"100/1s":    {Bytes: 100, Window: time.Second},
		// KB and MB are 1000-based, KiB and MiB 1024-based
		// (internal/bytesize, the one size parser).
		" 2 MB/ 5s":  {Bytes: 2_000_000, Window: 5 * time.Second},
		"64KB/60s":   {Bytes: 64_000, Window: time.Minute},
		"64Ki/60s":   {Bytes: 64 << 10, Window: time.Minute},
		"1.5MiB/60s": {Bytes: 3 << 19, Window: time.Minute},
		"off":        cos.NoMinThroughput,
		"0":          cos.NoMinThroughput,
	} {
		got, err := cos.ParseThroughput(in)
		if err != nil || got != want {
			t.Errorf("ParseThroughput(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64KiB", "64KiB/", "/60s", "-1KiB/60s", "0KiB/60s", "64KiB/500ms", "64XB/60s", "0.5/60s"} {
		if got, err := cos.ParseThroughput(in); err == nil {
			t.Errorf("ParseThroughput(%q) = %+v, want an error", in, got)
		}
	}
	if s := cos.DefaultMinThroughput.String(); s != "64KiB/60s" {
		t.Errorf("DefaultMinThroughput = %q", s)
	}
}
