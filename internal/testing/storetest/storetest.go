// Package storetest is the store contract (internal/store) as a test suite
// every backend runs, in the style of restic's internal/backend/test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t testing.TB) store.Store { return newMyStore(t) },
//			storetest.BigSize(12<<20)) // past the backend's multipart threshold
//	}
//
// Each subtest runs in parallel on a key prefix of its own (under a random
// run prefix), so the stores newStore returns may share one bucket, and
// other tests' keys may be there too. Capabilities (Conditional, Multipart,
// Checker, Clock) are tested when the store has them; GetRange tests store.Ranger,
// or store.RangeOfGet on a store without it. The Lock cases run when the
// store has store.Locker and its bucket has object lock (LockConfig), the
// Versions cases when it has store.Versioner and its bucket keeps versions:
// a backend runs the suite once more on such a bucket (the whole suite:
// every write to a locked bucket must carry its checksum). Lock expiry is
// waited out in real time (LockExpiry); the versions a case locks are then
// removed with a governance bypass, or, with NoBypass, the bypass is
// checked to be refused.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// Option adjusts the suite.
type Option func(*config)

type config struct {
	bigSize  int64
	prefix   string
	prompt   time.Duration
	noBypass bool
	expiry   time.Duration
}

// NoBypass says the store's credential may not bypass governance
// retention: the lock cases then check that a bypass is refused, instead
// of using one to remove what they locked.
func NoBypass() Option { return func(c *config) { c.noBypass = true } }

// LockExpiry is the governance retention LockExpires puts, then waits out
// (default 2s: a real server's clock cannot be moved).
func LockExpiry(d time.Duration) Option { return func(c *config) { c.expiry = d } }

// BigSize adds a round trip of n bytes: pass more than the backend's
// multipart threshold (0: none).
func BigSize(n int64) Option { return func(c *config) { c.bigSize = n } }

// Prefix sets the run's key prefix (default "storetest-<random>/").
func Prefix(p string) Option { return func(c *config) { c.prefix = p } }

// Prompt is how soon a call with a cancelled context must fail (default 10s).
func Prompt(d time.Duration) Option { return func(c *config) { c.prompt = d } }

// Run runs the conformance suite. newStore is called once per subtest, with
// that subtest's testing.TB.
func Run(t *testing.T, newStore func(t testing.TB) store.Store, opts ...Option) {
	t.Helper()
	cfg := config{prompt: 10 * time.Second, expiry: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.prefix == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.prefix = "storetest-" + hex.EncodeToString(b) + "/"
	}
	s := &suite{cfg: cfg, newStore: newStore}
	// The lock and version cases are run only where they apply: a
	// subtest that skipped would fail `make test` (testreport), and a
	// case that cannot apply is not a case.
	lock, versions := capabilities(t, newStore)
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store, p string)
		skip bool
	}{
		{"RoundTrip", s.roundTrip, false},
		{"GetMissing", s.getMissing, false},
		{"List", s.list, false},
		{"ListEmptyPrefix", s.listEmptyPrefix, false},
		{"ListNothing", s.listNothing, false},
		{"ListAfter", s.listAfter, false},
		{"Delete", s.delete, false},
		{"Overwrite", s.overwrite, false},
		{"PutIfAbsent", s.putIfAbsent, false},
		{"PutBodyError", s.putBodyError, false},
		{"Cancelled", s.cancelled, false},
		{"CancelMidPut", s.cancelMidPut, false},
		{"ConcurrentPuts", s.concurrentPuts, false},
		{"Multipart", s.multipart, false},
		{"Check", s.check, false},
		{"Time", s.time, false},
		{"GetRange", s.getRange, false},
		// store.Locker, on a bucket with object lock (lock.go).
		{"LockRefusesDelete", s.lockRefusesDelete, !lock},
		{"LockExpires", s.lockExpires, !lock},
		{"LockMultipart", s.lockMultipart, !lock || cfg.bigSize == 0},
		// store.Versioner, on a versioned bucket (lock.go).
		{"Versions", s.versions, !versions},
		{"VersionsCreateOnly", s.versionsCreateOnly, !versions},
	}
	for _, tc := range tests {
		if tc.skip {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			tc.fn(t, st, cfg.prefix+tc.name+"/")
		})
	}
}

type suite struct {
	cfg      config
	newStore func(testing.TB) store.Store
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// data is n deterministic, incompressible-looking bytes.
func data(n int64, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func put(t *testing.T, st store.Store, key string, b []byte) {
	t.Helper()
	n, err := st.Put(ctxT(t), key, bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	if n != int64(len(b)) {
		t.Fatalf("Put %s returned %d bytes, want %d", key, n, len(b))
	}
}

func get(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get %s: read: %v", key, err)
	}
	return b
}

func keysOf(objs []store.ObjectInfo) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}

func list(t *testing.T, st store.Store, prefix string) []store.ObjectInfo {
	t.Helper()
	objs, err := st.List(ctxT(t), prefix)
	if err != nil {
		t.Fatalf("List %q: %v", prefix, err)
	}
	return objs
}

// names checks that err follows the contract's shape: a *store.Error for
// op and key, whose text names both.
func names(t *testing.T, err error, op, key string) {
	t.Helper()
	var se *store.Error
	if !errors.As(err, &se) {
		t.Errorf("error %q (%T) is not a *store.Error", err, err)
		return
	}
	if se.Op != op || se.Key != key || se.Backend == "" {
		t.Errorf("store.Error{Backend %q, Op %q, Key %q}, want op %q key %q and a backend", se.Backend, se.Op, se.Key, op, key)
	}
	if msg := err.Error(); !strings.Contains(msg, se.Backend+": "+op+" "+key+": ") {
		t.Errorf("error %q does not read %q", msg, se.Backend+": "+op+" "+key+": <cause>")
	}
}

func (s *suite) roundTrip(t *testing.T, st store.Store, p string) {
	sizes := []int64{0, 1, 1000, 1 << 20}
	if s.cfg.bigSize > 0 {
		sizes = append(sizes, s.cfg.bigSize)
	}
	for i, n := range sizes {
		key := fmt.Sprintf("%sobj-%d", p, n)
		want := data(n, byte(i))
		put(t, st, key, want)
		if got := get(t, st, key); !bytes.Equal(got, want) {
			t.Errorf("Get %s: %d bytes, not the %d put", key, len(got), n)
		}
		objs := list(t, st, key)
		if len(objs) != 1 || objs[0].Key != key || objs[0].Size != n {
			t.Errorf("List %s: %+v, want one object of %d bytes", key, objs, n)
		} else if objs[0].LastModified.IsZero() {
			t.Errorf("List %s: no LastModified", key)
		}
	}
}

func (s *suite) getMissing(t *testing.T, st store.Store, p string) {
	key := p + "missing"
	rc, err := st.Get(ctxT(t), key)
	if err == nil {
		// A backend may report a missing key on the first read.
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if !errors.Is(err, store.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get of a missing key: %v; want an error wrapping store.ErrNotFound (and fs.ErrNotExist)", err)
	}
	names(t, err, "get", key)
	if store.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true for a missing key", err)
	}
	if !store.IsStoreError(err) {
		t.Errorf("IsStoreError(%v) = false", err)
	}
}

func (s *suite) list(t *testing.T, st store.Store, p string) {
	// Put out of order; List returns key order, with plain string-prefix
	// semantics (not directories). No key is also the "directory" of
	// another (a/b and a/b/c): MinIO cannot hold both, and the backup
	// layout never makes such keys.
	keys := []string{p + "b", p + "a/b/c", p + "a/bc", p + "a/bb", p + "a/a", p + "a-"}
	for i, k := range keys {
		put(t, st, k, data(int64(i+1), byte(i)))
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := keysOf(list(t, st, p)); !slices.Equal(got, want) {
		t.Errorf("List %q = %q, want %q", p, got, want)
	}
	if got, want := keysOf(list(t, st, p+"a/b")), []string{p + "a/b/c", p + "a/bb", p + "a/bc"}; !slices.Equal(got, want) {
		t.Errorf("List %q = %q, want %q", p+"a/b", got, want)
	}
	for _, o := range list(t, st, p+"a/b/c") {
		if o.Size != 2 || o.Key != p+"a/b/c" {
			t.Errorf("List %s: %s of %d bytes, want a/b/c of 2", p+"a/b/c", o.Key, o.Size)
		}
	}
}

func (s *suite) listEmptyPrefix(t *testing.T, st store.Store, p string) {
	keys := []string{p + "y", p + "x"}
	for _, k := range keys {
		put(t, st, k, []byte(k))
	}
	all := keysOf(list(t, st, ""))
	if !slices.IsSorted(all) {
		t.Errorf("List \"\" is not in key order")
	}
	for _, k := range keys {
		if _, found := slices.BinarySearch(all, k); !found {
			t.Errorf("List \"\" (%d keys) lacks %s", len(all), k)
		}
	}
}

func (s *suite) listNothing(t *testing.T, st store.Store, p string) {
	objs, err := st.List(ctxT(t), p+"nothing/")
	if err != nil || len(objs) != 0 {
		t.Errorf("List of an empty prefix: %v, %v; want no objects and no error", objs, err)
	}
}

// listAfter: the keys under a prefix after a key, in key order, through
// the store's AfterLister when it has one (store.ListAfterOf otherwise).
func (s *suite) listAfter(t *testing.T, st store.Store, p string) {
	keys := []string{p + "seg/0003", p + "seg/0001", p + "seg/0002", p + "seg/gaps/0002", p + "seg0", p + "other"}
	for i, k := range keys {
		put(t, st, k, data(int64(i+1), byte(i)))
	}
	listAfter := func(prefix, after string) []string {
		t.Helper()
		objs, err := store.ListAfterOf(ctxT(t), st, prefix, after)
		if err != nil {
			t.Fatalf("ListAfter %q after %q: %v", prefix, after, err)
		}
		if al, ok := st.(store.AfterLister); ok {
			direct, err := al.ListAfter(ctxT(t), prefix, after)
			if err != nil || !slices.Equal(keysOf(direct), keysOf(objs)) {
				t.Fatalf("AfterLister.ListAfter %q after %q = %q, %v; ListAfterOf %q", prefix, after, keysOf(direct), err, keysOf(objs))
			}
		}
		for _, o := range objs {
			if o.Size == 0 || o.LastModified.IsZero() {
				t.Errorf("ListAfter %q: %s without size or time", prefix, o.Key)
			}
		}
		return keysOf(objs)
	}
	seg := p + "seg/"
	for _, c := range []struct {
		after string
		want  []string
	}{
		{"", []string{seg + "0001", seg + "0002", seg + "0003", seg + "gaps/0002"}},
		{seg + "0001", []string{seg + "0002", seg + "0003", seg + "gaps/0002"}},
		{seg + "00015", []string{seg + "0002", seg + "0003", seg + "gaps/0002"}}, // a key that does not exist
		{seg + "0003", []string{seg + "gaps/0002"}},
		{seg + "gaps/0002", []string{}},
		{p + "a", []string{seg + "0001", seg + "0002", seg + "0003", seg + "gaps/0002"}}, // before the prefix
	} {
		if got := listAfter(seg, c.after); !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("ListAfter %q after %q = %q, want %q", seg, c.after, got, c.want)
		}
	}
	if got := listAfter(p+"nothing/", ""); len(got) != 0 {
		t.Errorf("ListAfter of an empty prefix = %q", got)
	}
}

func (s *suite) delete(t *testing.T, st store.Store, p string) {
	keys := []string{p + "1", p + "2", p + "3", p + "keep"}
	for _, k := range keys {
		put(t, st, k, []byte(k))
	}
	if err := st.Delete(ctxT(t), []string{p + "1", p + "2", p + "missing", p + "3"}); err != nil {
		t.Fatalf("Delete of three keys and a missing one: %v", err)
	}
	if err := st.Delete(ctxT(t), []string{p + "missing-too"}); err != nil {
		t.Errorf("Delete of a missing key: %v; want nil", err)
	}
	if err := st.Delete(ctxT(t), nil); err != nil {
		t.Errorf("Delete of no keys: %v", err)
	}
	if got := keysOf(list(t, st, p)); !slices.Equal(got, []string{p + "keep"}) {
		t.Errorf("after Delete: %q, want only %skeep", got, p)
	}
	if _, err := st.Get(ctxT(t), p+"2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a deleted key: %v; want store.ErrNotFound", err)
	}
}

func (s *suite) overwrite(t *testing.T, st store.Store, p string) {
	key := p + "k"
	put(t, st, key, []byte("first, longer"))
	put(t, st, key, []byte("second"))
	if got := string(get(t, st, key)); got != "second" {
		t.Errorf("after overwrite: %q, want %q", got, "second")
	}
	if objs := list(t, st, key); len(objs) != 1 || objs[0].Size != 6 {
		t.Errorf("after overwrite: %+v", objs)
	}
}

func (s *suite) putIfAbsent(t *testing.T, st store.Store, p string) {
	cs, ok := st.(store.Conditional)
	if !ok {
		t.Skip("no store.Conditional")
	}
	key := p + "k"
	n, err := cs.PutIfAbsent(ctxT(t), key, strings.NewReader("first"))
	if err != nil || n != 5 {
		t.Fatalf("PutIfAbsent on a free key: %d, %v", n, err)
	}
	_, err = cs.PutIfAbsent(ctxT(t), key, strings.NewReader("second"))
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutIfAbsent on a taken key: %v; want store.ErrExists", err)
	}
	names(t, err, "put", key)
	if store.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true for a refused conditional create", err)
	}
	if got := string(get(t, st, key)); got != "first" {
		t.Errorf("after a refused PutIfAbsent: %q, want %q", got, "first")
	}
	// Large enough for a multipart upload, where the backend has one.
	if s.cfg.bigSize > 0 {
		_, err = cs.PutIfAbsent(ctxT(t), key, bytes.NewReader(data(s.cfg.bigSize, 7)))
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("big PutIfAbsent on a taken key: %v; want store.ErrExists", err)
		}
		if got := string(get(t, st, key)); got != "first" {
			t.Errorf("after a refused big PutIfAbsent: %d bytes, want %q", len(got), "first")
		}
	}
}

type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

var errBody = errors.New("storetest: the body failed")

func (s *suite) putBodyError(t *testing.T, st store.Store, p string) {
	key := p + "k"
	_, err := st.Put(ctxT(t), key, &errReader{r: bytes.NewReader(data(100<<10, 1)), err: errBody})
	if err == nil {
		t.Fatal("Put with a failing body succeeded")
	}
	names(t, err, "put", key)
	if !errors.Is(err, errBody) {
		t.Errorf("Put with a failing body: %v; want it to wrap the body's error", err)
	}
	if store.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true for the caller's body error", err)
	}
	if objs := list(t, st, key); len(objs) != 0 {
		t.Errorf("a failed Put left %+v", objs)
	}
}

func (s *suite) cancelled(t *testing.T, st store.Store, p string) {
	key := p + "k"
	put(t, st, key, []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v; want context.Canceled", op, err)
		}
		if store.IsTransient(err) {
			t.Errorf("%s: IsTransient(%v) = true for a cancelled call", op, err)
		}
	}
	start := time.Now()
	_, err := st.Put(ctx, p+"new", strings.NewReader("y"))
	check("Put", err)
	rc, err := st.Get(ctx, key)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	check("Get", err)
	_, err = st.List(ctx, p)
	check("List", err)
	check("Delete", st.Delete(ctx, []string{key}))
	if d := time.Since(start); d > s.cfg.prompt {
		t.Errorf("cancelled calls took %v, want under %v", d, s.cfg.prompt)
	}
	if got := keysOf(list(t, st, p)); !slices.Equal(got, []string{key}) {
		t.Errorf("after cancelled calls: %q, want only %s", got, key)
	}
}

// cancelReader cancels its context after n bytes, then keeps giving data.
type cancelReader struct {
	n      int64
	cancel func()
	once   sync.Once
	read   int64
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if c.read >= c.n {
		c.once.Do(c.cancel)
	}
	for i := range p {
		p[i] = byte(i)
	}
	c.read += int64(len(p))
	return len(p), nil
}

func (s *suite) cancelMidPut(t *testing.T, st store.Store, p string) {
	key := p + "k"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// An endless body, cancelled after 256 KiB: the Put must end.
	_, err := st.Put(ctx, key, &cancelReader{n: 256 << 10, cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Put cancelled mid-body: %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > s.cfg.prompt {
		t.Errorf("Put cancelled mid-body took %v, want under %v", d, s.cfg.prompt)
	}
	if objs := list(t, st, key); len(objs) != 0 {
		t.Errorf("a cancelled Put left %+v", objs)
	}
	if err != nil {
		names(t, err, "put", key)
	}
}

func (s *suite) concurrentPuts(t *testing.T, st store.Store, p string) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	var want []string
	for i := range n {
		key := fmt.Sprintf("%s%02d", p, i)
		want = append(want, key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.Put(ctxT(t), key, bytes.NewReader(data(int64(1000+i), byte(i))))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Puts: %v", err)
	}
	objs := list(t, st, p)
	if got := keysOf(objs); !slices.Equal(got, want) {
		t.Fatalf("after concurrent Puts: %q, want %q", got, want)
	}
	for i, o := range objs {
		if o.Size != int64(1000+i) {
			t.Errorf("%s: %d bytes, want %d", o.Key, o.Size, 1000+i)
		}
	}
	for i := range n {
		if got := get(t, st, want[i]); !bytes.Equal(got, data(int64(1000+i), byte(i))) {
			t.Errorf("%s: content differs", want[i])
		}
	}
}

func (s *suite) multipart(t *testing.T, st store.Store, p string) {
	mp, ok := st.(store.Multipart)
	if !ok {
		t.Skip("no store.Multipart")
	}
	ups, err := mp.ListUploads(ctxT(t), p)
	if err != nil || len(ups) != 0 {
		t.Errorf("ListUploads of a prefix with no uploads: %+v, %v", ups, err)
	}
	if err := mp.AbortUpload(ctxT(t), store.Upload{Key: p + "k", UploadID: "no-such-upload"}); err != nil {
		t.Errorf("AbortUpload of an upload that does not exist: %v; want nil (counts as aborted)", err)
	}
	if kl, ok := st.(store.KeyUploadLister); ok {
		ups, err := kl.ListUploadsForKey(ctxT(t), p+"k")
		if err != nil || len(ups) != 0 {
			t.Errorf("ListUploadsForKey of a key with no uploads: %+v, %v", ups, err)
		}
	}
}

func (s *suite) check(t *testing.T, st store.Store, _ string) {
	c, ok := st.(store.Checker)
	if !ok {
		t.Skip("no store.Checker")
	}
	if err := c.Check(ctxT(t)); err != nil {
		t.Errorf("Check of a working store: %v", err)
	}
}

// time: store.Clock's time is within a few seconds of this machine's
// (the test servers run here, on one clock), and a cancelled context
// fails. A wrapper whose inner store has no Clock may say ErrUnsupported.
func (s *suite) time(t *testing.T, st store.Store, _ string) {
	c, ok := st.(store.Clock)
	if !ok {
		t.Skip("no store.Clock")
	}
	const within = 5 * time.Second
	before := time.Now()
	got, err := c.Time(ctxT(t))
	after := time.Now()
	if errors.Is(err, store.ErrUnsupported) {
		t.Skip("the wrapped store has no store.Clock")
	}
	if err != nil {
		t.Fatalf("Time of a working store: %v", err)
	}
	if got.Before(before.Add(-within)) || got.After(after.Add(within)) {
		t.Errorf("Time = %s, want within %s of this machine's clock (%s .. %s)", got.Format(time.RFC3339Nano), within,
			before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Time(ctx); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Time with a cancelled context: %v, want an error wrapping context.Canceled", err)
	} else if !store.IsStoreError(err) {
		t.Errorf("Time with a cancelled context: %v, want a *store.Error", err)
	}
}

// getRange: ranges inside, across the end of and past an object, of an
// empty object, of a missing key (ErrNotFound), invalid ranges, and a
// cancelled context. A store without store.Ranger is read through
// store.RangeOfGet, which callers use then.
func (s *suite) getRange(t *testing.T, st store.Store, p string) {
	getRange := func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
		return store.RangeOfGet(ctx, st, key, off, n)
	}
	if r, ok := st.(store.Ranger); ok {
		getRange = r.GetRange
	}
	read := func(ctx context.Context, key string, off, n int64) ([]byte, error) {
		rc, err := getRange(ctx, key, off, n)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	key := p + "obj"
	want := data(10000, 7)
	put(t, st, key, want)
	empty := p + "empty"
	put(t, st, empty, nil)
	for _, c := range []struct {
		key      string
		off, n   int64
		from, to int
	}{
		{key, 0, 4096, 0, 4096},
		{key, 4096, 4096, 4096, 8192},
		{key, 8192, 4096, 8192, 10000}, // across the end: short
		{key, 9999, 1, 9999, 10000},
		{key, 0, 1 << 20, 0, 10000},
		{key, 10000, 10, 10000, 10000}, // at the end: empty
		{key, 50000, 10, 10000, 10000}, // past the end: empty
		{empty, 0, 4096, 0, 0},
	} {
		got, err := read(ctxT(t), c.key, c.off, c.n)
		if err != nil {
			t.Errorf("GetRange(%s, %d, %d): %v", c.key, c.off, c.n, err)
			continue
		}
		var w []byte
		if c.key == key {
			w = want[c.from:c.to]
		}
		if !bytes.Equal(got, w) {
			t.Errorf("GetRange(%s, %d, %d): %d bytes, want bytes %d-%d of the object (%d)", c.key, c.off, c.n, len(got), c.from, c.to, len(w))
		}
	}
	missing := p + "missing"
	_, err := read(ctxT(t), missing, 0, 10)
	if !errors.Is(err, store.ErrNotFound) || store.IsTransient(err) || !store.IsStoreError(err) {
		t.Errorf("GetRange of a missing key: %v; want a permanent store error wrapping store.ErrNotFound", err)
	} else if _, ranger := st.(store.Ranger); ranger {
		names(t, err, "get range", missing)
	}
	for _, bad := range [][2]int64{{-1, 10}, {0, 0}, {0, -5}} {
		if _, err := read(ctxT(t), key, bad[0], bad[1]); err == nil || store.IsTransient(err) {
			t.Errorf("GetRange(%s, %d, %d): %v; want a permanent error", key, bad[0], bad[1], err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := read(ctx, key, 0, 10); !errors.Is(err, context.Canceled) || store.IsTransient(err) {
		t.Errorf("GetRange with a cancelled context: %v; want context.Canceled, not transient", err)
	}
}

// capabilities reports whether a store from newStore has object lock
// (store.Locker, LockConfig().Enabled) and keeps versions
// (store.Versioner, Versioning()).
func capabilities(t *testing.T, newStore func(t testing.TB) store.Store) (lock, versions bool) {
	t.Helper()
	st := newStore(t)
	if l, ok := st.(store.Locker); ok {
		info, err := l.LockConfig(ctxT(t))
		if err != nil {
			t.Fatalf("LockConfig: %v", err)
		}
		lock = info.Enabled
	}
	if v, ok := st.(store.Versioner); ok {
		on, err := v.Versioning(ctxT(t))
		if err != nil {
			t.Fatalf("Versioning: %v", err)
		}
		versions = on
	}
	return lock, versions
}
