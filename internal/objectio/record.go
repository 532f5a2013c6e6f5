package objectio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/armada/etcd-recovery/internal/store"
)

// A record is a small JSON object the tool writes beside the backups (a
// manifest, a drill or proof record, an ownership record, an orphan
// marker, a journal gap): stored as it is, uncompressed and unencrypted,
// so that an SRE can read it with any S3 client. ReadRecord is the one
// read of such an object: bounded, whole and decoded, so that every kind
// of record fails the same way.

// MaxRecordBytes is the default bound of a record's size: far above any
// record the tool writes (a manifest is a few KiB); a larger object is
// not one of its records.
const MaxRecordBytes = 4 << 20

// ErrDamagedRecord: the object at a record's key is not a record (larger
// than the bound, or not JSON of its kind). A damaged record is the
// store's content, not a failure to reach the store: callers tell the
// two apart with errors.Is.
var ErrDamagedRecord = errors.New("damaged record")

// RecordOptions are the optional parts of a record's read.
type RecordOptions struct {
	// Version reads that version of the key (the store must be a
	// store.Versioner); "" reads the current object.
	Version string
	// Max bounds the record's size; 0 is MaxRecordBytes.
	Max int64
}

// ReadRecord reads the JSON record at key into v. Errors: the store's
// (store.ErrNotFound when there is none, per the store's contract),
// wrapped with the key; ErrDamagedRecord when the object is larger than
// the bound or does not decode into v.
func ReadRecord(ctx context.Context, st store.Store, key string, v any, o RecordOptions) error {
	b, err := ReadRecordBytes(ctx, st, key, o)
	if err != nil {
		return err
	}
	return DecodeRecord(key, b, v)
}

// DecodeRecord decodes the bytes of the record at key (read with
// ReadRecordBytes or ReadRecordVersion) into v: ErrDamagedRecord when they
// are not JSON of v's kind.
func DecodeRecord(key string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: not a valid record (%v): %w", key, err, ErrDamagedRecord)
	}
	return nil
}

// ReadRecordBytes is ReadRecord without the decoding: the record's bytes,
// whole, for a caller that decodes and checks them itself (a manifest).
func ReadRecordBytes(ctx context.Context, st store.Store, key string, o RecordOptions) ([]byte, error) {
	if o.Version != "" {
		v, ok := st.(store.Versioner)
		if !ok {
			return nil, fmt.Errorf("read %s version %s: the store keeps no versions", key, o.Version)
		}
		return ReadRecordVersion(ctx, v, key, o)
	}
	rc, err := st.Get(ctx, key)
	return readBounded(rc, err, key, o.Max)
}

// ReadRecordVersion is ReadRecordBytes of the version o.Version of key.
func ReadRecordVersion(ctx context.Context, v store.Versioner, key string, o RecordOptions) ([]byte, error) {
	rc, err := v.GetVersion(ctx, key, o.Version)
	return readBounded(rc, err, key, o.Max)
}

func readBounded(rc io.ReadCloser, err error, key string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = MaxRecordBytes
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes, not a record of the tool: %w", key, limit, ErrDamagedRecord)
	}
	return b, nil
}

// CreateRecord writes v as the JSON record at key, create-only: a record
// there already is store.ErrExists, never overwritten. ret, when set,
// locks it (the store must be a store.Locker). A store without
// conditional creates is asked first (the race that leaves is the
// caller's fence to prevent).
func CreateRecord(ctx context.Context, st store.Store, key string, v any, ret *store.Retention) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	b = append(b, '\n')
	if lk, ok := st.(store.Locker); ok && ret != nil {
		_, err = lk.PutWith(ctx, key, bytes.NewReader(b), store.PutOptions{IfAbsent: true, Retention: ret})
		return err
	}
	if c, ok := st.(store.Conditional); ok {
		_, err = c.PutIfAbsent(ctx, key, bytes.NewReader(b))
		return err
	}
	objs, err := st.List(ctx, key)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(objs, func(o store.ObjectInfo) bool { return o.Key == key }) {
		return fmt.Errorf("%s: %w", key, store.ErrExists)
	}
	_, err = st.Put(ctx, key, bytes.NewReader(b))
	return err
}
