package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// StepCheckDecrypts names CheckDecrypts' step in its errors.
const StepCheckDecrypts = "check that the snapshot decrypts"

// headerChunk is what one ranged read of CheckDecrypts asks for: the age
// header of a backup encrypted to a handful of recipients fits in it, so
// the check is one small request.
const headerChunk = 4 << 10

// CheckDecrypts proves that a mounted identity opens an encrypted backup:
// it reads only the age header of the backup's snapshot object and
// unwraps its file key with ids (seal.OpenHeader); no payload is
// downloaded or decrypted. On a store.Ranger it asks for the first
// headerChunk bytes (more, in chunks, only for a longer header, never past
// seal.HeaderReadLimit); on any other store it opens the object with Get
// and closes it after the header.
//
// It returns nil when an identity opens the header, and nil for a backup
// that is not encrypted (nothing to open). Otherwise the error names the
// cluster, the backup and the step, and its cause is one of:
//   - seal.ErrNoIdentity (errors.Is): no given identity opens the header;
//     it names the backup's recipients, the identities tried and the
//     header's stanza count. Nil or empty ids give this too, saying no
//     identity is mounted (nothing is read then).
//   - seal.ErrTampered: the object does not start with a well-formed age
//     header (damaged, cut short, or a stanza of a recorded recipient its
//     identity does not open).
//   - anything else: the store could not be read (store.IsStoreError,
//     ErrNotFound for a missing object) or the context ended; this says
//     nothing about whether the backup decrypts.
func CheckDecrypts(ctx context.Context, st store.Store, layout Layout, m *Manifest, ids *seal.Identities) error {
	if m == nil {
		return errors.New(StepCheckDecrypts + ": no manifest")
	}
	if !m.Encrypted() {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("cluster %s backup %s: %s: %w", m.ClusterID, m.Name, StepCheckDecrypts, ctxerr.Wrap(ctx, err))
	}
	if ids.Len() == 0 {
		return fail(seal.OpenHeader(nil, ids, m.Recipients()))
	}
	if m.Snapshot.Object == "" {
		return fail(errors.New("the manifest names no snapshot object"))
	}
	key := layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
	var src io.Reader
	if r, ok := st.(store.Ranger); ok {
		rr := &rangeReader{ctx: ctx, st: r, key: key}
		defer rr.close()
		src = rr
	} else {
		body, err := st.Get(ctx, key)
		if err != nil {
			return fail(err)
		}
		defer body.Close()
		src = body
	}
	if err := seal.OpenHeader(src, ids, m.Recipients()); err != nil {
		return fail(err)
	}
	return nil
}

// NewestEncrypted is the manifest of the cluster's newest backup that is
// encrypted, committed and not damaged (CheckEntries), or nil when it has
// none: the backup a header check (CheckDecrypts) is about. Its error is
// the listing's or a manifest read's (store failures).
func NewestEncrypted(ctx context.Context, st store.Store, layout Layout, clusterID string) (*Manifest, error) {
	entries, err := Inventory(ctx, st, layout, clusterID)
	if err != nil {
		return nil, err
	}
	manifests, _, unknownErr := CheckEntries(ctx, st, layout, entries, DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, e := range entries { // newest first
		if m := manifests[i]; m != nil && e.Good() && m.Encrypted() {
			return m, nil
		}
	}
	return nil, unknownErr
}

// rangeReader reads an object from its start with ranged reads of
// headerChunk bytes, the next one only when the previous is used up and
// was whole (a short one is the object's end).
type rangeReader struct {
	ctx  context.Context
	st   store.Ranger
	key  string
	off  int64 // where the open chunk starts
	got  int64 // bytes read from the open chunk
	body io.ReadCloser
	eof  bool
}

func (r *rangeReader) Read(p []byte) (int, error) {
	for !r.eof {
		if r.body == nil {
			b, err := r.st.GetRange(r.ctx, r.key, r.off, headerChunk)
			if err != nil {
				return 0, err
			}
			r.body, r.got = b, 0
		}
		n, err := r.body.Read(p)
		r.got += int64(n)
		if err == io.EOF {
			r.body.Close()
			r.body = nil
			if r.got < headerChunk {
				r.eof = true
			}
			r.off += r.got
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.EOF
}

func (r *rangeReader) close() {
	if r.body != nil {
		r.body.Close()
	}
}
