package site_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/store/retry"
	"github.com/armada/etcd-recovery/internal/usage"
)

// checked is a store whose Check answers err, or blocks until its context
// ends when hang is set (a frozen server).
type checked struct {
	store.Store
	err  error
	hang bool
}

func (c checked) Check(ctx context.Context) error {
	if c.hang {
		<-ctx.Done()
		return fmt.Errorf("head bucket: %w", ctx.Err())
	}
	return c.err
}

func opener(st store.Store, prefix string) site.Opener {
	return func(context.Context) (store.Store, catalog.Layout, error) {
		return st, catalog.Layout{Prefix: prefix}, nil
	}
}

// The decision of site.Choose, mode by mode: which errors of the
// primary's check fall back (unreachable: network, refused, 5xx, stall,
// no answer in time) and which do not (a 403, a missing bucket: answers),
// that a hung primary costs the check's deadline only, and that second
// without a second site is a usage error.
func TestChoose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sec := opener(memstore.New(), "second")
	forbidden := store.Permanent(errors.New("cos: head bucket b: AccessDenied (HTTP 403)"))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name     string
		mode     site.Mode
		primary  store.Store
		second   site.Opener
		wantSite site.Name
		wantErr  string
	}{
		{"auto, the primary answers", site.Auto, checked{Store: memstore.New()}, sec, site.Primary, ""},
		{"auto, refused", site.Auto, checked{Store: memstore.New(), err: refused}, sec, site.Second, ""},
		{"auto, a 503", site.Auto, checked{Store: memstore.New(), err: store.Transient(errors.New("503 SlowDown"))}, sec, site.Second, ""},
		{"auto, stalled", site.Auto, checked{Store: memstore.New(), err: store.ErrStalled}, sec, site.Second, ""},
		{"auto, frozen", site.Auto, checked{Store: memstore.New(), hang: true}, sec, site.Second, ""},
		{"auto, access denied", site.Auto, checked{Store: memstore.New(), err: forbidden}, sec, "", "not reading the second site"},
		{"auto, no second site, frozen primary: not checked", site.Auto, checked{Store: memstore.New(), hang: true}, nil, site.Primary, ""},
		{"primary, frozen: not checked", site.Primary, checked{Store: memstore.New(), hang: true}, sec, site.Primary, ""},
		{"second", site.Second, checked{Store: memstore.New(), hang: true}, sec, site.Second, ""},
		{"second without one", site.Second, memstore.New(), nil, "", "no second site is configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			ch, err := site.Choose(ctx, site.Options{Mode: tc.mode, Primary: opener(tc.primary, "primary"), Second: tc.second, CheckTimeout: 200 * time.Millisecond})
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %v, the check's deadline is 200ms", took)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if tc.name == "second without one" && !usage.Is(err) {
					t.Fatalf("err %v: not a usage error", err)
				}
				return
			}
			if err != nil || ch.Site != tc.wantSite {
				t.Fatalf("chose %q (%v), want %q", ch.Site, err, tc.wantSite)
			}
			fell := tc.mode == site.Auto && tc.wantSite == site.Second
			if ch.FellBack() != fell || (fell != strings.HasPrefix(ch.Note(), "reading the second site: the primary is unreachable: ")) {
				t.Fatalf("fell back %v, note %q", ch.FellBack(), ch.Note())
			}
			if want := map[site.Name]string{site.Primary: "primary", site.Second: "second"}[ch.Site]; ch.Layout.Prefix != want {
				t.Fatalf("layout %q, want %q", ch.Layout.Prefix, want)
			}
		})
	}
}

// closedPort is a loopback address nothing listens on (connection
// refused).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A refused connection is judged at once: Check makes one attempt where
// the store's retries (the COS SDK's, with the production defaults: 5
// retries from 200ms; internal/store/retry's) would fill its deadline.
// The same COS store's own call, without the check's mark, still retries
// (so the bound below is the fix's, not the machine's). A frozen server
// costing only the deadline is TestChoose's "auto, frozen" and
// TestSiteAutoFallbackCLI's.
func TestCheckRefusedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := cos.New(cos.Config{Endpoint: "http://" + closedPort(t), Bucket: "gone", Region: "us-east-1",
		Creds: cos.Credentials{AccessKeyID: "k", SecretAccessKey: "s", Source: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for name, st := range map[string]store.Store{
		"cos":            st,
		"retry, refused": retry.Wrap(checked{Store: memstore.New(), err: refused}, retry.Policy{}),
	} {
		start := time.Now()
		err := site.Check(ctx, st, catalog.Layout{Prefix: "p"}, 10*time.Second)
		took := time.Since(start)
		if !site.Unreachable(err) || !store.IsConnectFailure(err) {
			t.Errorf("%s: Check: %v; want an unreachable store, a connection refused", name, err)
		}
		if took > time.Second {
			t.Errorf("%s: a refused connection took %v to judge; want at once (well under 1s)", name, took)
		}
		t.Logf("%s: judged unreachable in %v: %v", name, took.Round(time.Millisecond), err)
	}
	// Without the check's mark, the same calls are retried.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := st.Check(cctx); err == nil {
		t.Fatal("a check of a closed port succeeded")
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("the store's own check of a closed port took %v: it no longer retries, and the bound above proves nothing", took)
	}
}
