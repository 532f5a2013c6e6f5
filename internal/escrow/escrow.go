// Package escrow stores, opens and checks a cluster's escrow: what a
// restore needs besides the data (catalog.EscrowList: the EtcdCluster, its
// TLS secrets and Services), sealed with age and content-addressed under
// the layout's _escrow/ folder (docs/object-layout.md#escrow).
//
//   - Store seals a List to recipients and writes it create-only at
//     Layout.EscrowKey(cluster, address), with the backup's object lock;
//     an escrow already at that address is reused (nothing written), its
//     lock extended to the backup's when shorter.
//   - Open reads the escrow a manifest names, verifies the stored bytes,
//     decrypts them, verifies the plaintext and recomputes its address.
//   - Check compares the escrowed certificates with what the members
//     serve (Served: one TLS handshake per member) and records each
//     certificate's expiry.
//
// It is plumbing: it imports internal/catalog, internal/objectio,
// internal/seal and internal/store only. Reading the objects from the
// Kubernetes API is package kube's; the backup composes the steps.
package escrow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// ErrNoRecipient: an escrow is never stored in plaintext.
var ErrNoRecipient = errors.New("no recipient to seal the escrow to (it is never stored in plaintext)")

// maxStored bounds an escrow object's stored size: the plaintext bound
// plus age's header and per-chunk overhead (16 bytes per 64 KiB).
const maxStored = catalog.MaxEscrowBytes + catalog.MaxEscrowBytes/4096 + 64<<10

// Written is what Write did: the escrow's reference (state present: the
// caller records its checks' outcome) and whether this call created the
// object (false: an escrow at that address was reused).
type Written struct {
	Ref     *catalog.EscrowRef
	Created bool
	// Key is the object's key.
	Key string
	// Problems of a reused object (its stored size is not the one its
	// content sealed makes: damaged); then Ref's state is mismatch.
	Problems []string
}

// Store seals list to rs and stores it at its address, create-only, with
// the retention ret (nil: no lock); an escrow already at that address is
// reused and its retention extended to ret when shorter. See Write.
func Store(ctx context.Context, st store.Store, l catalog.Layout, cluster string, list *catalog.EscrowList, rs seal.Recipients, ret *store.Retention) (*catalog.EscrowRef, error) {
	w, err := Write(ctx, st, l, cluster, list, rs, ret)
	return w.Ref, err
}

// Write is Store that also says whether it created the object (a failed
// backup removes an escrow only if its own run created it). The ref's
// State is present; Objects, sizes, sha256s and Recipients are set.
func Write(ctx context.Context, st store.Store, l catalog.Layout, cluster string, list *catalog.EscrowList, rs seal.Recipients, ret *store.Retention) (Written, error) {
	if rs.Len() == 0 {
		return Written{}, fmt.Errorf("escrow of cluster %s: %w", cluster, ErrNoRecipient)
	}
	plain, err := catalog.MarshalEscrow(list)
	if err != nil {
		return Written{}, fmt.Errorf("escrow of cluster %s: %w", cluster, err)
	}
	if len(plain) > catalog.MaxEscrowBytes {
		return Written{}, fmt.Errorf("escrow of cluster %s: %d bytes, more than the bound %d", cluster, len(plain), catalog.MaxEscrowBytes)
	}
	recipients := rs.Strings()
	addr := catalog.EscrowAddress(recipients, plain)
	key := l.EscrowKey(cluster, addr)
	rawSum := sha256.Sum256(plain)
	ref := &catalog.EscrowRef{
		State:      catalog.EscrowPresent,
		Address:    addr,
		RawSize:    int64(len(plain)),
		RawSHA256:  hex.EncodeToString(rawSum[:]),
		Recipients: recipients,
		Objects:    list.ObjectNames(),
	}
	out := Written{Ref: ref, Key: key}

	// Stored only when it changes: the same objects sealed to the same
	// recipients have the same address.
	size, sum, err := storedSum(ctx, st, key)
	switch {
	case err == nil:
		ref.StoredSize, ref.StoredSHA256 = size, sum
		out.checkReused(plain, rs)
		return out, extend(ctx, st, key, ret)
	case !store.IsNotFound(err):
		return out, fmt.Errorf("escrow %s: reading the existing object: %w", key, err)
	}
	w, err := objectio.CreateWith(ctx, st, key, bytes.NewReader(plain),
		objectio.Encoding{Compression: objectio.CompressNone, Recipients: rs}, objectio.PutOptions{Retention: ret})
	if errors.Is(err, store.ErrExists) {
		// Another run stored it meanwhile: the same address is the same
		// plaintext and recipients. Reuse it, with its own stored bytes.
		size, sum, err := storedSum(ctx, st, key)
		if err != nil {
			return out, fmt.Errorf("escrow %s: written by another run meanwhile, and reading it failed: %w", key, err)
		}
		ref.StoredSize, ref.StoredSHA256 = size, sum
		out.checkReused(plain, rs)
		return out, extend(ctx, st, key, ret)
	}
	if err != nil {
		return out, fmt.Errorf("escrow %s: %w", key, err)
	}
	if w.RawSHA256 != ref.RawSHA256 || w.RawSize != ref.RawSize {
		return out, fmt.Errorf("escrow %s: the sealed bytes were read as %d bytes, sha256 %s; want %d, %s", key, w.RawSize, w.RawSHA256, ref.RawSize, ref.RawSHA256)
	}
	ref.StoredSize, ref.StoredSHA256 = w.StoredSize, w.StoredSHA256
	out.Created = true
	return out, nil
}

// checkReused compares a reused escrow's stored size with the size
// sealing plain to rs writes (age's output size is a function of the
// plaintext's length and the recipients): a difference is a damaged
// object, recorded as a problem (state mismatch) naming the key, so it
// is not reused silently.
func (w *Written) checkReused(plain []byte, rs seal.Recipients) {
	want, err := sealedSize(plain, rs)
	if err != nil {
		w.Problems = append(w.Problems, fmt.Sprintf("escrow %s: its expected sealed size could not be computed: %v", w.Key, err))
	} else if want != w.Ref.StoredSize {
		w.Problems = append(w.Problems, fmt.Sprintf("escrow %s is damaged: %d bytes stored, sealing its content makes %d: delete it so the next backup stores it anew", w.Key, w.Ref.StoredSize, want))
	}
	if len(w.Problems) > 0 {
		w.Ref.State, w.Ref.Problems = catalog.EscrowMismatch, append(w.Ref.Problems, w.Problems...)
	}
}

// sealedSize is the size of plain sealed to rs as Write stores it.
func sealedSize(plain []byte, rs seal.Recipients) (int64, error) {
	var n countWriter
	wc, err := objectio.NewWriter(&n, objectio.CompressNone, rs)
	if err != nil {
		return 0, err
	}
	if _, err := wc.Write(plain); err != nil {
		return 0, err
	}
	if err := wc.Close(); err != nil {
		return 0, err
	}
	return int64(n), nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// storedSum reads an object whole (bounded) and returns its size and
// sha256: an existing escrow's stored bytes, for the manifest that names
// it (age is randomised: the same plaintext sealed again differs).
func storedSum(ctx context.Context, st store.Store, key string) (int64, string, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return 0, "", err
	}
	defer rc.Close()
	h := objectio.NewHashCounter()
	n, err := io.Copy(h, io.LimitReader(rc, maxStored+1))
	if err != nil {
		return 0, "", err
	}
	if n > maxStored {
		return 0, "", fmt.Errorf("larger than the bound of an escrow (%d bytes)", maxStored)
	}
	return h.N(), h.Sum(), nil
}

// Extend is extend for a caller that re-locks a backup: the escrow it
// names stays locked at least as long as the backup (backup's re-lock of
// the newest backup).
func Extend(ctx context.Context, st store.Store, key string, ret *store.Retention) error {
	return extend(ctx, st, key, ret)
}

// extend sets the retention of an existing escrow to ret when its own is
// shorter (a reused escrow is locked at least as long as the newest
// backup that names it). A store without Locker, or no ret: nothing.
func extend(ctx context.Context, st store.Store, key string, ret *store.Retention) error {
	lk, ok := st.(store.Locker)
	if ret == nil || !ok || ret.Until.IsZero() {
		return nil
	}
	cur, err := lk.Retention(ctx, key, "")
	if err != nil {
		return fmt.Errorf("escrow %s: reading its retention to extend it to %s: %w", key, ret.Until.UTC().Format("2006-01-02T15:04:05Z"), err)
	}
	if !cur.Until.Before(ret.Until) {
		return nil
	}
	mode := cur.Mode
	if mode == "" {
		mode = ret.Mode
	}
	if err := lk.SetRetention(ctx, key, "", store.Retention{Mode: mode, Until: ret.Until}); err != nil {
		return fmt.Errorf("escrow %s: extending its retention to %s: %w", key, ret.Until.UTC().Format("2006-01-02T15:04:05Z"), err)
	}
	return nil
}

// Open reads the escrow ref names (a manifest's), checks the stored bytes
// against the ref's size and sha256, decrypts them with ids, checks the
// plaintext's size and sha256 and recomputes its address from the ref's
// recipients: an object that is not the one the manifest names (changed
// bytes, or another valid age object at that key) is refused. Every error
// names the escrow's key; an identity that matches none of the
// recipients says "no identity matches".
func Open(ctx context.Context, st store.Store, l catalog.Layout, cluster string, ref *catalog.EscrowRef, ids *seal.Identities) (*catalog.EscrowList, error) {
	if ref == nil || !ref.Stored() {
		state := catalog.EscrowState("")
		if ref != nil {
			state = ref.State
		}
		return nil, fmt.Errorf("escrow of cluster %s: the backup names no stored escrow (state %q)", cluster, state)
	}
	key := l.EscrowKey(cluster, ref.Address)
	if err := ref.Validate(); err != nil {
		return nil, fmt.Errorf("escrow %s: %w", key, err)
	}
	if ids == nil || ids.Len() == 0 {
		return nil, fmt.Errorf("escrow %s: no identity given to decrypt it (sealed to %v)", key, ref.Recipients)
	}
	r, err := objectio.Open(ctx, st, key, objectio.Expect{
		StoredSize: ref.StoredSize, StoredSHA256: ref.StoredSHA256,
		RawSize: ref.RawSize, RawSHA256: ref.RawSHA256,
		Compression: objectio.CompressNone,
		Encrypted:   true, Recipients: ref.Recipients, Identities: ids,
	})
	if err != nil {
		return nil, openError(key, ref, err)
	}
	defer r.Close()
	plain, err := io.ReadAll(io.LimitReader(r, catalog.MaxEscrowBytes+1))
	if err != nil {
		return nil, openError(key, ref, err)
	}
	if len(plain) > catalog.MaxEscrowBytes {
		return nil, fmt.Errorf("escrow %s: refused: larger than the bound %d", key, catalog.MaxEscrowBytes)
	}
	if got := catalog.EscrowAddress(ref.Recipients, plain); got != ref.Address {
		return nil, fmt.Errorf("escrow %s: refused: its content has address %s, not the %s the backup names (tampered)", key, got, ref.Address)
	}
	list, err := catalog.UnmarshalEscrow(plain)
	if err != nil {
		return nil, fmt.Errorf("escrow %s: refused: %w", key, err)
	}
	return list, nil
}

// openError names the key and says what went wrong in an operator's words.
func openError(key string, ref *catalog.EscrowRef, err error) error {
	var oe *objectio.Error
	if errors.As(err, &oe) {
		switch {
		case oe.Kind == objectio.KindNoIdentity:
			return fmt.Errorf("escrow %s: no identity matches: it is sealed to %v: %w", key, ref.Recipients, err)
		case oe.Kind == objectio.KindMissing:
			return fmt.Errorf("escrow %s: not in the store: %w", key, err)
		case oe.Damaged():
			return fmt.Errorf("escrow %s: refused: not the object the backup names (tampered or damaged): %w", key, err)
		}
	}
	return fmt.Errorf("escrow %s: %w", key, err)
}
