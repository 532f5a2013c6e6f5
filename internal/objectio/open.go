package objectio

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// UnknownSize in an Expect's size skips that size's check (the sha256 is
// still checked).
const UnknownSize = -1

// Expect is what Open checks an object against (a manifest's record of it)
// and how to decode it.
type Expect struct {
	StoredSize   int64 // of the object as stored; UnknownSize to skip
	StoredSHA256 string
	RawSize      int64 // of the decoded bytes (Snapshot: the database); UnknownSize to skip
	RawSHA256    string
	Compression  Compression
	// Snapshot: the decoded bytes are an etcd snapshot stream, the
	// database followed by etcd's sha256 of it. RawSize and RawSHA256 are
	// the database's, and the trailer is checked against it.
	Snapshot bool
	// Encrypted objects are decrypted (age) with Identities; Recipients
	// are the ones the manifest records, named when no identity matches.
	Encrypted  bool
	Recipients []string
	Identities *seal.Identities
	// Progress, when set, is called with the stored bytes read so far.
	Progress func(stored int64)
	// VersionID, when set, reads that version of the object
	// (store.Versioner.GetVersion: a backup behind a delete marker or an
	// overwrite); empty reads the current one (Get).
	VersionID string
}

// Result is what reading an object measured.
type Result struct {
	StoredSize   int64
	StoredSHA256 string
	RawSize      int64  // Snapshot: of the database, the trailer excluded
	RawSHA256    string // Snapshot: of the database
	// Trailer is etcd's trailing sha256 (Snapshot), shorter than 32 bytes
	// when the stream was too short to hold it.
	Trailer []byte
}

// Kind is what an *Error found.
type Kind string

// Kinds of *Error. KindNoIdentity is the only one that says nothing about
// the object's bytes (Damaged is false).
const (
	KindMissing    Kind = "missing"            // the object is not in the store (wraps store.ErrNotFound)
	KindNoIdentity Kind = "no identity"        // no identity opens the age header (wraps seal.ErrNoIdentity)
	KindTampered   Kind = "tampered"           // the age layer does not authenticate (wraps seal.ErrTampered)
	KindDecode     Kind = "decode"             // decompression failed
	KindStoredSHA  Kind = "stored sha256"      // the stored bytes hash differently
	KindStoredSize Kind = "stored size"        // a different number of stored bytes
	KindEtcdHash   Kind = "etcd trailing hash" // etcd's trailing sha256 is missing or does not match the database
	KindRawSHA     Kind = "raw sha256"         // the decoded bytes hash differently
	KindRawSize    Kind = "raw size"           // a different number of decoded bytes
)

// Error is an object that does not match what was expected, or cannot be
// decoded. errors.As finds it; Unwrap gives the cause (store.ErrNotFound,
// a seal error, the decoder's) when there is one.
type Error struct {
	Key  string
	Kind Kind
	// Detail says what was found against what was expected (mismatches).
	Detail string
	// Got is what was measured up to the failure.
	Got Result
	Err error
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindMissing, KindNoIdentity, KindTampered:
		return fmt.Sprintf("%s: %v", e.Key, e.Err)
	case KindDecode:
		return fmt.Sprintf("%s: decompress after %d stored bytes: %v", e.Key, e.Got.StoredSize, e.Err)
	}
	msg := fmt.Sprintf("%s: %s mismatch: %s", e.Key, e.Kind, e.Detail)
	if e.Err != nil {
		msg += fmt.Sprintf("; decompressing it failed: %v", e.Err)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Damaged reports whether the object's bytes are at fault (missing,
// tampered, undecodable or not matching), not the identities given.
func (e *Error) Damaged() bool { return e.Kind != KindNoIdentity }

// Mismatch reports whether the object was read to its end and a size, a
// sha256 or etcd's trailer did not match.
func (e *Error) Mismatch() bool {
	switch e.Kind {
	case KindStoredSHA, KindStoredSize, KindEtcdHash, KindRawSHA, KindRawSize:
		return true
	}
	return false
}

// errClosed is what Read returns after Close.
var errClosed = errors.New("objectio: read after Close")

// Reader is the decoded content of an object Open verifies as it streams.
type Reader struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	key    string
	exp    Expect

	in, out *chunkQueue
	stored  *HashCounter
	plain   *errTracker // the decrypting reader (encrypted objects)
	inDone  chan struct{}
	decDone chan struct{}
	decErr  error // stage 2's, read after decDone

	snap *SnapshotHasher // Snapshot
	raw  *HashCounter    // otherwise

	buf, cur []byte
	err      error // sticky: io.EOF once every check passed
	res      Result
	finished bool
}

// Open reads key and returns its decoded bytes, checking them against exp
// while they stream: download (hashing the stored bytes), decryption and
// decompression, and hashing the decoded bytes overlap on separate
// goroutines, through a few recycled 1 MiB buffers.
//
// Open itself fails with an *Error of KindMissing (the object is not
// there), KindNoIdentity or KindTampered (an encrypted object's age header:
// no plaintext is returned before it opened), KindDecode (an unknown
// compression), or the store's or the context's error. The reader's Read
// returns io.EOF only after every size and sha256 in exp (and, for a
// snapshot, etcd's trailer) matched; otherwise its last Read returns an
// *Error (KindTampered, KindDecode or a mismatch kind), or the store's
// error when the download failed mid-stream, or the context's. Close it
// when done; Result says what was measured.
func Open(ctx context.Context, st store.Store, key string, exp Expect) (*Reader, error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	rc, err := get(ctx, st, key, exp.VersionID)
	if err != nil {
		cancel()
		if store.IsNotFound(err) {
			return nil, &Error{Key: key, Kind: KindMissing, Err: err}
		}
		return nil, err
	}
	r := &Reader{parent: parent, ctx: ctx, cancel: cancel, key: key, exp: exp,
		in: newChunkQueue(), out: newChunkQueue(), stored: NewHashCounter(),
		inDone: make(chan struct{}), decDone: make(chan struct{})}
	if exp.Snapshot {
		r.snap = NewSnapshotHasher()
	} else {
		r.raw = NewHashCounter()
	}

	// Stage 1: download, and hash what is stored.
	go func() {
		defer close(r.inDone)
		defer rc.Close()
		r.in.fill(ctx, rc, func(b []byte) {
			r.stored.Write(b)
			if exp.Progress != nil {
				exp.Progress(r.stored.N())
			}
		})
	}()
	inR := &queueReader{ctx: ctx, q: r.in}
	abort := func() { cancel(); <-r.inDone }

	// Stage 2: decrypt (an encrypted object) and decompress.
	var src io.Reader = inR
	if exp.Encrypted {
		pr, err := seal.Decrypt(inR, exp.Identities, exp.Recipients)
		if err != nil {
			abort()
			if perr := parent.Err(); perr != nil {
				return nil, perr
			}
			// Decided from what age read, never from in.err: stage 1
			// may still be running. seal.Decrypt reports a failed read
			// of the source as such, never as ErrTampered, so
			// ErrTampered means the bytes the store gave do not open.
			if errors.Is(err, seal.ErrTampered) {
				return nil, &Error{Key: key, Kind: KindTampered, Err: err}
			}
			if errors.Is(err, seal.ErrNoIdentity) {
				return nil, &Error{Key: key, Kind: KindNoIdentity, Err: err}
			}
			return nil, err // the store failed while the header was read
		}
		r.plain = &errTracker{r: pr}
		src = r.plain
	}
	dec, err := NewDecoder(src, exp.Compression)
	if err != nil {
		abort()
		return nil, &Error{Key: key, Kind: KindDecode, Err: err}
	}
	go func() {
		defer close(r.decDone)
		r.out.fill(ctx, dec, nil)
		derr := r.out.err
		dec.Close() // stops its read-ahead: inR is ours again
		// Read whatever the decoder did not need (nothing, unless it
		// failed), so the stored hash covers the whole object. An
		// encrypted object is drained through age, so that damage past
		// the end of the compressed stream is still reported as such.
		_, rerr := io.Copy(io.Discard, src)
		if rerr == nil && r.plain != nil {
			_, rerr = io.Copy(io.Discard, inR)
		}
		if derr == nil {
			derr = rerr
		}
		r.decErr = derr
		<-r.inDone
	}()
	return r, nil
}

// get opens key, or its version versionID when set.
func get(ctx context.Context, st store.Store, key, versionID string) (io.ReadCloser, error) {
	if versionID == "" {
		return st.Get(ctx, key)
	}
	v, ok := st.(store.Versioner)
	if !ok {
		return nil, store.Unsupported(st, "get version", key)
	}
	return v.GetVersion(ctx, key, versionID)
}

// Read reads the decoded bytes.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.next()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// WriteTo writes the decoded bytes to w, a whole buffer at a time (io.Copy
// uses it). It returns nil once every check passed; a write error of w is
// returned as it is.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		if len(r.cur) > 0 {
			k, err := w.Write(r.cur)
			n += int64(k)
			r.cur = r.cur[k:]
			if err != nil {
				return n, err
			}
			continue
		}
		if r.err == io.EOF {
			return n, nil
		}
		if r.err != nil {
			return n, r.err
		}
		r.next()
	}
}

// next takes the next decoded chunk, or ends the stream with its verdict.
func (r *Reader) next() {
	if r.buf != nil {
		r.out.free <- r.buf[:cap(r.buf)]
		r.buf = nil
	}
	select {
	case b, ok := <-r.out.full:
		if !ok {
			r.err = r.finish()
			return
		}
		if r.snap != nil {
			r.snap.Write(b)
		} else {
			r.raw.Write(b)
		}
		r.buf, r.cur = b, b
	case <-r.ctx.Done():
		r.err = r.finish()
	}
}

// finish waits for the stages to end and decides: io.EOF when everything
// matched.
func (r *Reader) finish() error {
	<-r.decDone
	r.finished = true
	r.measure()
	if perr := r.parent.Err(); perr != nil {
		return perr
	}
	if r.ctx.Err() != nil {
		return errClosed
	}
	res := r.res
	if derr := r.decErr; derr != nil {
		if r.in.err != nil {
			return r.in.err // the store failed mid-stream
		}
		if store.IsStoreError(derr) {
			return derr
		}
		if r.plain != nil && errors.Is(r.plain.err, seal.ErrTampered) {
			return &Error{Key: r.key, Kind: KindTampered, Got: res, Err: r.plain.err}
		}
		// The object was read to its end: a flipped or missing byte is
		// the stored checksum mismatch it is.
		if res.StoredSHA256 != r.exp.StoredSHA256 {
			return &Error{Key: r.key, Kind: KindStoredSHA, Got: res, Err: derr,
				Detail: fmt.Sprintf("the object (%d bytes) hashes to %s, expected %s (%d bytes)", res.StoredSize, res.StoredSHA256, r.exp.StoredSHA256, r.exp.StoredSize)}
		}
		return &Error{Key: r.key, Kind: KindDecode, Got: res, Err: derr}
	}
	return r.compare()
}

func (r *Reader) measure() {
	r.res = Result{StoredSize: r.stored.N(), StoredSHA256: r.stored.Sum()}
	if r.snap != nil {
		sr := r.snap.Result()
		r.res.RawSize, r.res.RawSHA256, r.res.Trailer = sr.RawSize, sr.RawSHA256, sr.Trailer
	} else {
		r.res.RawSize, r.res.RawSHA256 = r.raw.N(), r.raw.Sum()
	}
}

// compare checks what was read against exp, in the order restore reports
// its checks: stored sha256, etcd's trailer, raw sha256, sizes.
func (r *Reader) compare() error {
	res, exp := r.res, r.exp
	fail := func(k Kind, detail string) error { return &Error{Key: r.key, Kind: k, Got: res, Detail: detail} }
	if res.StoredSHA256 != exp.StoredSHA256 {
		return fail(KindStoredSHA, fmt.Sprintf("the object (%d bytes) hashes to %s, expected %s", res.StoredSize, res.StoredSHA256, exp.StoredSHA256))
	}
	if exp.Snapshot {
		if len(res.Trailer) < etcdHashSize {
			return fail(KindEtcdHash, fmt.Sprintf("snapshot is %d bytes: too short to hold etcd's sha256", res.RawSize+int64(len(res.Trailer))))
		}
		if t := hex.EncodeToString(res.Trailer); t != res.RawSHA256 {
			return fail(KindEtcdHash, fmt.Sprintf("etcd's trailing sha256 is %s, the database hashes to %s", t, res.RawSHA256))
		}
	}
	if res.RawSHA256 != exp.RawSHA256 {
		return fail(KindRawSHA, fmt.Sprintf("the decoded bytes (%d) hash to %s, expected %s", res.RawSize, res.RawSHA256, exp.RawSHA256))
	}
	if exp.StoredSize != UnknownSize && res.StoredSize != exp.StoredSize {
		return fail(KindStoredSize, fmt.Sprintf("the object is %d bytes, expected %d", res.StoredSize, exp.StoredSize))
	}
	if exp.RawSize != UnknownSize && res.RawSize != exp.RawSize {
		return fail(KindRawSize, fmt.Sprintf("%d decoded bytes, expected %d", res.RawSize, exp.RawSize))
	}
	return io.EOF
}

// Result is what was measured; complete once Read returned io.EOF or an
// error (or after Close).
func (r *Reader) Result() Result { return r.res }

// Close stops the stages (when the object was not read to its end) and
// waits for them.
func (r *Reader) Close() error {
	r.cancel()
	r.cur = nil
	if !r.finished {
		<-r.decDone
		r.finished = true
		r.measure()
		if r.err == nil {
			r.err = errClosed
		}
	}
	return nil
}

// errTracker remembers the first error other than io.EOF of the reader
// it wraps: the decrypting reader's, whatever the decompressor makes of it.
type errTracker struct {
	r   io.Reader
	err error
}

func (t *errTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// ReadBack reads key back (after a write) and checks it against want. It
// returns nil, a mismatch *Error (Mismatch() true, or KindTampered/
// KindDecode: the object read back differs), or the error of reading it
// (the store's, store.ErrNotFound included, or the context's).
func ReadBack(ctx context.Context, st store.Store, key string, want Expect) error {
	r, err := Open(ctx, st, key, want)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Kind == KindMissing {
			return e.Err
		}
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// ExpectPlain is the Expect of an object stored as b, neither compressed
// nor encrypted.
func ExpectPlain(b []byte) Expect {
	h := NewHashCounter()
	h.Write(b)
	return Expect{StoredSize: h.N(), StoredSHA256: h.Sum(), RawSize: h.N(), RawSHA256: h.Sum(), Compression: CompressNone}
}
