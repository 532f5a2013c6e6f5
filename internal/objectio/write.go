package objectio

import (
	"context"
	"errors"
	"io"

	"github.com/armada/etcd-recovery/internal/store"
)

// Written is what a write measured: the raw bytes read from the source and
// the stored (compressed, encrypted) bytes uploaded.
type Written struct {
	RawSize      int64
	RawSHA256    string
	StoredSize   int64
	StoredSHA256 string
}

// Expect is what reading the object back must find: its stored and raw
// sizes and sha256s (for a plaintext, uncompressed object the same).
func (w Written) Expect(c Compression) Expect {
	return Expect{StoredSize: w.StoredSize, StoredSHA256: w.StoredSHA256, RawSize: w.RawSize, RawSHA256: w.RawSHA256, Compression: c}
}

// Put writes key with the store's conditional create when it has one
// (store.Conditional), so that an existing object is never replaced
// (store.ErrExists); on another store it is a plain Put.
func Put(ctx context.Context, st store.Store, key string, r io.Reader) (int64, error) {
	if cs, ok := st.(store.Conditional); ok {
		return cs.PutIfAbsent(ctx, key, r)
	}
	return st.Put(ctx, key, r)
}

// PutOptions are the options of PutWith and CreateWith.
type PutOptions struct {
	// Retention, when set, locks the new object (store.Locker.PutWith; a
	// store without Locker, or a bucket without object lock, refuses it).
	// Nil: written as Put writes it.
	Retention *store.Retention
}

// PutWith is Put with options: with a Retention, the object is written
// create-only (when the store is Conditional, as Put) with that
// retention through store.Locker.
func PutWith(ctx context.Context, st store.Store, key string, r io.Reader, opts PutOptions) (int64, error) {
	if opts.Retention == nil {
		return Put(ctx, st, key, r)
	}
	lk, ok := st.(store.Locker)
	if !ok {
		return 0, store.Unsupported(st, "put", key)
	}
	_, conditional := st.(store.Conditional)
	res, err := lk.PutWith(ctx, key, r, store.PutOptions{IfAbsent: conditional, Retention: opts.Retention})
	return res.Size, err
}

// Write streams r through compression and encryption (enc) into the object
// key, replacing it if it exists, and returns the sizes and sha256s of the
// raw and the stored bytes.
func Write(ctx context.Context, st store.Store, key string, r io.Reader, enc Encoding) (Written, error) {
	return write(ctx, st.Put, key, r, enc)
}

// Create is Write with Put's conditional create: a backup never replaces an
// existing object.
func Create(ctx context.Context, st store.Store, key string, r io.Reader, enc Encoding) (Written, error) {
	return CreateWith(ctx, st, key, r, enc, PutOptions{})
}

// CreateWith is Create with PutWith's options.
func CreateWith(ctx context.Context, st store.Store, key string, r io.Reader, enc Encoding, opts PutOptions) (Written, error) {
	return write(ctx, func(ctx context.Context, key string, r io.Reader) (int64, error) {
		return PutWith(ctx, st, key, r, opts)
	}, key, r, enc)
}

var errUploadStopped = errors.New("upload stopped reading")

func write(ctx context.Context, put func(context.Context, string, io.Reader) (int64, error), key string, r io.Reader, enc Encoding) (Written, error) {
	raw, stored := NewHashCounter(), NewHashCounter()
	src := io.TeeReader(r, raw)
	result := func() Written {
		return Written{RawSize: raw.N(), RawSHA256: raw.Sum(), StoredSize: stored.N(), StoredSHA256: stored.Sum()}
	}
	if enc.Compression == CompressNone && enc.Recipients.Len() == 0 {
		// Stored as it is: no pipe, no goroutine.
		_, err := put(ctx, key, io.TeeReader(src, stored))
		return result(), err
	}
	if _, err := encoder(io.Discard, enc.Compression); err != nil { // before anything is uploaded
		return Written{}, err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		ew, err := NewWriter(io.MultiWriter(pw, stored), enc.Compression, enc.Recipients)
		if err == nil {
			_, err = io.Copy(ew, src)
			if cerr := ew.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err) // nil: EOF
		done <- err
	}()
	_, err := put(ctx, key, pr)
	if err != nil {
		pr.CloseWithError(errUploadStopped)
	} else {
		pr.Close()
	}
	if werr := <-done; err == nil && werr != nil {
		err = werr
	}
	return result(), err
}
