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
	"github.com/armada/etcd-recovery/internal/store/memstore"
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
