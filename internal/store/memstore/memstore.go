// Package memstore is an in-memory store.Store, for tests and as the
// smallest example of a backend: it follows the store contract (errors are
// *store.Error "memstore: <op> <key>: <cause>", a missing key is
// store.ErrNotFound, a taken key store.ErrExists) and has the Conditional,
// Multipart, Ranger, Checker, Locker and Versioner capabilities. It is safe for concurrent use.
// It registers as kind "mem" (store.Open: one store per bucket name, per
// process); only tests link it.
//
// Multipart: every Put is an upload while its body is being read
// (ListUploads shows it; AbortUpload makes the Put fail and store nothing),
// and AddUpload leaves an upload behind as a process killed mid-Put would.
//
// Versions and object lock (store.Versioner, store.Locker): New is an
// unversioned bucket without lock; NewVersioned keeps every version (Put
// adds one, Delete adds a delete marker); NewLocked is a versioned bucket
// with object lock, whose retentions are judged by the store's clock (Now,
// which a test moves to expire a lock). DenyBypass stands for a credential
// without s3:BypassGovernanceRetention: a governance bypass is then refused
// as S3 refuses it. Version ids are increasing ("v000001", ...); an
// unversioned bucket's objects are version "null".
package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

const backend = "memstore"

// Store is an in-memory object store. The zero value is not usable: call
// New.
type Store struct {
	// Now is the clock for LastModified and Initiated (time.Now when nil).
	Now func() time.Time

	// DenyBypass: DeleteVersions refuses to bypass governance retention,
	// as for a credential without s3:BypassGovernanceRetention.
	DenyBypass bool

	mu        sync.Mutex
	objects   map[string][]*object // by key, oldest version first
	uploads   map[string]*upload   // by upload id
	nextID    int
	nextVer   int
	versioned bool
	lock      store.LockInfo
}

// object is one version of a key: bytes, or a delete marker.
type object struct {
	id     string
	data   []byte
	mod    time.Time
	marker bool
	ret    store.Retention
}

type upload struct {
	store.Upload
	aborted chan struct{} // closed by AbortUpload
}

var (
	_ store.Store           = (*Store)(nil)
	_ store.Conditional     = (*Store)(nil)
	_ store.Multipart       = (*Store)(nil)
	_ store.KeyUploadLister = (*Store)(nil)
	_ store.Checker         = (*Store)(nil)
	_ store.Clock           = (*Store)(nil)
	_ store.Ranger          = (*Store)(nil)
	_ store.AfterLister     = (*Store)(nil)
	_ store.Locker          = (*Store)(nil)
	_ store.Versioner       = (*Store)(nil)
)

// New returns an empty store: a bucket without versioning or object lock.
func New() *Store {
	return &Store{objects: map[string][]*object{}, uploads: map[string]*upload{}}
}

// NewVersioned returns an empty versioned bucket without object lock.
func NewVersioned() *Store {
	s := New()
	s.versioned = true
	return s
}

// NewLocked returns an empty versioned bucket with object lock, whose
// default retention is info's DefaultMode and DefaultPeriod (none when
// empty); info.Enabled is implied.
func NewLocked(info store.LockInfo) *Store {
	s := NewVersioned()
	info.Enabled = true
	s.lock = info
	return s
}

// latest is key's current version, nil when none (s.mu held).
func (s *Store) latest(key string) *object {
	vs := s.objects[key]
	if len(vs) == 0 {
		return nil
	}
	return vs[len(vs)-1]
}

// live is key's current version when it is an object, not a marker.
func (s *Store) live(key string) *object {
	if o := s.latest(key); o != nil && !o.marker {
		return o
	}
	return nil
}

// add stores a new current version of key (s.mu held).
func (s *Store) add(key string, o *object) {
	if !s.versioned {
		o.id = "null"
		s.objects[key] = []*object{o}
		return
	}
	s.nextVer++
	o.id = fmt.Sprintf("v%06d", s.nextVer)
	s.objects[key] = append(s.objects[key], o)
}

// Backend names this backend in errors ("memstore").
func (s *Store) Backend() string { return backend }

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func fail(op, key string, err error) error {
	return &store.Error{Backend: backend, Op: op, Key: key, Err: err}
}

// errAborted is the cause of a Put whose upload was aborted.
var errAborted = errors.New("upload aborted")

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	return s.put(ctx, key, r, false)
}

// PutIfAbsent implements store.Conditional: the check and the write are one
// step, after the body is read.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error) {
	return s.put(ctx, key, r, true)
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, ifAbsent bool) (int64, error) {
	res, err := s.PutWith(ctx, key, r, store.PutOptions{IfAbsent: ifAbsent})
	return res.Size, err
}

// PutWith implements store.Locker: Put or PutIfAbsent, with a retention
// (refused on a bucket without object lock). A version without one gets
// the bucket's default retention.
func (s *Store) PutWith(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.PutResult, error) {
	ifAbsent := opts.IfAbsent
	if err := ctx.Err(); err != nil {
		return store.PutResult{}, fail("put", key, err)
	}
	s.mu.Lock()
	lock := s.lock
	s.mu.Unlock()
	if opts.Retention != nil {
		if !lock.Enabled {
			return store.PutResult{}, fail("put", key, store.Permanent(errors.New("a retention was asked for, but the bucket has no object lock")))
		}
		if err := opts.Retention.Check(); err != nil {
			return store.PutResult{}, fail("put", key, err)
		}
	}
	u := s.begin(key)
	defer s.end(u)
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		if err := ctx.Err(); err != nil {
			return store.PutResult{}, fail("put", key, err)
		}
		select {
		case <-u.aborted:
			return store.PutResult{}, fail("put", key, errAborted)
		default:
		}
		n, err := r.Read(chunk)
		buf.Write(chunk[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return store.PutResult{}, fail("put", key, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return store.PutResult{}, fail("put", key, err)
	}
	if ifAbsent && s.live(key) != nil {
		return store.PutResult{}, fail("put", key, store.ErrExists)
	}
	now := s.now()
	o := &object{data: buf.Bytes(), mod: now}
	switch {
	case opts.Retention != nil:
		o.ret = *opts.Retention
	case lock.Enabled && lock.DefaultMode != "" && lock.DefaultPeriod > 0:
		o.ret = store.Retention{Mode: lock.DefaultMode, Until: now.Add(lock.DefaultPeriod)}
	}
	s.add(key, o)
	res := store.PutResult{Size: int64(buf.Len())}
	if s.versioned {
		res.VersionID = o.id
	}
	return res, nil
}

// begin registers an upload for a Put in progress.
func (s *Store) begin(key string) *upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	u := &upload{Upload: store.Upload{Key: key, UploadID: strconv.Itoa(s.nextID), Initiated: s.now()}, aborted: make(chan struct{})}
	s.uploads[u.UploadID] = u
	return u
}

func (s *Store) end(u *upload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uploads, u.UploadID)
}

// Get implements store.Store. The body is a copy, read under ctx.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fail("get", key, err)
	}
	s.mu.Lock()
	o := s.live(key)
	s.mu.Unlock()
	if o == nil {
		return nil, fail("get", key, store.ErrNotFound)
	}
	return &body{ctx: ctx, key: key, r: bytes.NewReader(o.data)}, nil
}

// GetRange implements store.Ranger: a copy of at most length bytes of key
// from offset (empty past the end).
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fail("get range", key, err)
	}
	if offset < 0 || length <= 0 {
		return nil, fail("get range", key, fmt.Errorf("invalid range: offset %d, length %d", offset, length))
	}
	s.mu.Lock()
	o := s.live(key)
	s.mu.Unlock()
	if o == nil {
		return nil, fail("get range", key, store.ErrNotFound)
	}
	data := o.data
	if offset >= int64(len(data)) {
		data = nil
	} else {
		data = data[offset:min(int64(len(data)), offset+length)]
	}
	return &body{ctx: ctx, key: key, op: "get range", r: bytes.NewReader(data)}, nil
}

type body struct {
	ctx context.Context
	key string
	op  string // "get" when empty
	r   *bytes.Reader
}

func (b *body) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		op := b.op
		if op == "" {
			op = "get"
		}
		return 0, fail(op, b.key, err)
	}
	return b.r.Read(p)
}

func (b *body) Close() error { return nil }

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	return s.ListAfter(ctx, prefix, "")
}

// ListAfter implements store.AfterLister.
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string) ([]store.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fail("list", prefix, err)
	}
	s.mu.Lock()
	out := []store.ObjectInfo{}
	for k := range s.objects {
		if o := s.live(k); o != nil && strings.HasPrefix(k, prefix) && k > startAfter {
			out = append(out, store.ObjectInfo{Key: k, Size: int64(len(o.data)), LastModified: o.mod})
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements store.Store: missing keys are not an error. On a
// versioned bucket each key gets a delete marker (its versions stay).
func (s *Store) Delete(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fail("delete", keys[0], err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if s.versioned {
			s.add(k, &object{marker: true, mod: s.now()})
			continue
		}
		delete(s.objects, k) // an unversioned bucket has no lock
	}
	return nil
}

// ListUploads implements store.Multipart: the Puts in progress and the
// uploads added with AddUpload, in key order.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	return s.listUploads(ctx, "list uploads", prefix, func(k string) bool { return strings.HasPrefix(k, prefix) })
}

// ListUploadsForKey implements store.KeyUploadLister.
func (s *Store) ListUploadsForKey(ctx context.Context, key string) ([]store.Upload, error) {
	return s.listUploads(ctx, "list uploads", key, func(k string) bool { return k == key })
}

func (s *Store) listUploads(ctx context.Context, op, arg string, match func(string) bool) ([]store.Upload, error) {
	if err := ctx.Err(); err != nil {
		return nil, fail(op, arg, err)
	}
	s.mu.Lock()
	out := []store.Upload{}
	for _, u := range s.uploads {
		if match(u.Key) {
			out = append(out, u.Upload)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].UploadID < out[j].UploadID
	})
	return out, nil
}

// AbortUpload implements store.Multipart. An upload that no longer exists
// counts as aborted; a Put in progress fails and stores nothing.
func (s *Store) AbortUpload(ctx context.Context, u store.Upload) error {
	if err := ctx.Err(); err != nil {
		return fail("abort upload", u.Key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.uploads[u.UploadID]; ok && cur.Key == u.Key {
		close(cur.aborted)
		delete(s.uploads, u.UploadID)
	}
	return nil
}

// AddUpload leaves an unfinished upload on key, initiated at initiated, as
// a process killed mid-Put would.
func (s *Store) AddUpload(key string, initiated time.Time) store.Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	u := &upload{Upload: store.Upload{Key: key, UploadID: strconv.Itoa(s.nextID), Initiated: initiated}, aborted: make(chan struct{})}
	s.uploads[u.UploadID] = u
	return u.Upload
}

// Time implements store.Clock: the store's clock (Now), the one its
// LastModified, Initiated and retentions are judged by.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fail("time", "", err)
	}
	return s.now(), nil
}

// Check implements store.Checker: a memory store is always reachable.
func (s *Store) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fail("check", "", err)
	}
	return nil
}
