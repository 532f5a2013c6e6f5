package undelete

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// writeAttempts bounds the tries of one transaction whose answer was an
// error that may be passing (a timeout, a leader change, a member gone):
// the guards make a retry safe, a transaction applied once is refused the
// second time and found present.
const writeAttempts = 4

// inBatches calls do on consecutive batches of the n items, each of at
// most u.ops items and u.bytes bytes (size(i) is item i's), at least one.
// A batch the server refuses as too large (tooLarge) halves both bounds
// and is tried again, down to one item; do's other errors end it.
func (u *run) inBatches(ctx context.Context, n int, size func(i int) int, do func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi, sum := lo, 0
		for hi < n && hi-lo < u.ops && (hi == lo || sum+size(hi) <= u.bytes) {
			sum += size(hi)
			hi++
		}
		err := do(lo, hi)
		if err != nil && tooLarge(err) && hi-lo > 1 {
			u.ops, u.bytes = max(1, (hi-lo)/2), max(1, sum/2)
			u.o.Log.Warn("undelete: the server refused a transaction as too large; smaller ones", "cluster", u.o.ClusterID,
				"keys", hi-lo, "bytes", sum, "now_keys", u.ops, "now_bytes", u.bytes, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// getAll reads n keys (key(i); size(i) its expected value's size) in
// transactions of Get operations (inBatches), calling got for each with
// its live state (nil when absent).
func (u *run) getAll(ctx context.Context, n int, key func(i int) string, size func(i int) int,
	got func(i int, kv *mvccpb.KeyValue) error) error {
	return u.inBatches(ctx, n, size, func(lo, hi int) error {
		ops := make([]clientv3.Op, 0, hi-lo)
		for i := lo; i < hi; i++ {
			ops = append(ops, clientv3.OpGet(key(i)))
		}
		rctx, cancel := context.WithTimeout(ctx, u.o.RequestTimeout)
		resp, err := u.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return err
		}
		for i, r := range resp.Responses {
			var kv *mvccpb.KeyValue
			if g := r.GetResponseRange(); g != nil && len(g.Kvs) > 0 {
				kv = g.Kvs[0]
			}
			if err := got(lo+i, kv); err != nil {
				return err
			}
		}
		return nil
	})
}

// write writes the items in order, in guarded transactions.
func (u *run) write(ctx context.Context) error {
	o := u.o
	written, last := 0, time.Now()
	err := u.inBatches(ctx, len(u.items), func(i int) int { return itemSize(u.items[i]) }, func(lo, hi int) error {
		if err := u.commit(ctx, u.items[lo:hi]); err != nil {
			return err
		}
		written += hi - lo
		if time.Since(last) > 5*time.Second || written == len(u.items) {
			o.Log.Info("undelete: writing", "cluster", o.ClusterID, "done", written, "of", len(u.items))
			last = time.Now()
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The cluster answers no more (after writeAttempts): the rest is
		// left pending, for a rerun.
		return u.fail(StepWrite, err)
	}
	if n := u.countFailed(); n > 0 {
		return u.fail(StepWrite, fmt.Errorf("%d key(s) could not be written (action failed in the report)", n))
	}
	return nil
}

func (u *run) countFailed() int {
	n := 0
	for _, it := range u.items {
		if it.res.Action == ActionFailed {
			n++
		}
	}
	return n
}

func itemSize(it *item) int { return len(it.kv.Key) + len(it.kv.Value) }

// guard is an item's compare: still absent, or (Replace) still at the
// revision read.
func guard(it *item) clientv3.Cmp {
	if it.liveMod > 0 {
		return clientv3.Compare(clientv3.ModRevision(string(it.kv.Key)), "=", it.liveMod)
	}
	return clientv3.Compare(clientv3.CreateRevision(string(it.kv.Key)), "=", 0)
}

// commit writes a batch in one transaction. A batch the server refuses
// as too large is that error (inBatches halves it); a single key it
// refuses so fails. A batch whose guard failed is written key by key.
func (u *run) commit(ctx context.Context, batch []*item) error {
	resp, err := u.txn(ctx, batch)
	switch {
	case err != nil && tooLarge(err) && len(batch) > 1:
		return err
	case err != nil && tooLarge(err):
		batch[0].res.Action = ActionFailed
		batch[0].res.Reason = fmt.Sprintf("the server refuses it: %v", err)
		return nil
	case err != nil:
		return fmt.Errorf("keys %q to %q: %w", batch[0].kv.Key, batch[len(batch)-1].kv.Key, err)
	case resp.Succeeded:
		for _, it := range batch {
			u.done(it, resp.Header.Revision)
		}
		return nil
	case len(batch) > 1:
		for _, it := range batch {
			if err := u.commit(ctx, []*item{it}); err != nil {
				return err
			}
		}
		return nil
	default:
		return u.guardFailed(ctx, batch[0])
	}
}

func (u *run) done(it *item, rev int64) {
	it.res.Written = rev
	if it.liveMod > 0 {
		it.res.Action = ActionReplaced
	} else {
		it.res.Action = ActionRestored
	}
}

// guardFailed: the key was created (or changed) since it was read. It is
// left alone; when it holds the point's bytes (an attempt whose answer
// was lost wrote it, or someone restored it) it is present.
func (u *run) guardFailed(ctx context.Context, it *item) error {
	rctx, cancel := context.WithTimeout(ctx, u.o.RequestTimeout)
	g, err := u.cli.Get(rctx, string(it.kv.Key))
	cancel()
	if err != nil {
		return fmt.Errorf("key %q: its guard failed and it could not be read again: %w", it.kv.Key, err)
	}
	if len(g.Kvs) > 0 && bytes.Equal(g.Kvs[0].Value, it.kv.Value) && it.retried {
		// A try of this run whose answer was lost (a timeout, a member
		// gone) wrote it, most likely: the bytes are the point's.
		u.done(it, g.Kvs[0].ModRevision)
		it.res.Reason = "written by a try whose answer was lost (or by someone else, with the point's bytes)"
		return nil
	}
	if len(g.Kvs) > 0 && bytes.Equal(g.Kvs[0].Value, it.kv.Value) {
		it.res.Action = ActionPresent
		it.res.Reason = fmt.Sprintf("written at revision %d by someone else or by a try whose answer was lost", g.Kvs[0].ModRevision)
		return nil
	}
	it.res.Action = ActionAppeared
	if len(g.Kvs) > 0 {
		it.res.Reason = fmt.Sprintf("created or changed at revision %d after it was read: left alone", g.Kvs[0].ModRevision)
	} else {
		it.res.Reason = "changed and deleted again after it was read: left alone"
	}
	return nil
}

// txn runs a batch's transaction, trying again (the guards make it safe)
// after an error that may pass.
func (u *run) txn(ctx context.Context, batch []*item) (*clientv3.TxnResponse, error) {
	cmps := make([]clientv3.Cmp, 0, len(batch))
	ops := make([]clientv3.Op, 0, len(batch))
	for _, it := range batch {
		cmps = append(cmps, guard(it))
		ops = append(ops, clientv3.OpPut(string(it.kv.Key), string(it.kv.Value)))
	}
	var err error
	for attempt := 1; ; attempt++ {
		// A transaction once sent is waited for (RequestTimeout), even when
		// ctx is cancelled meanwhile (a signal): its answer says whether its
		// keys were written, and the report and the record must say so;
		// a cancelled ctx stops the run between transactions.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.o.RequestTimeout)
		var resp *clientv3.TxnResponse
		resp, err = u.cli.Txn(rctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err == nil || tooLarge(err) || ctx.Err() != nil || attempt == writeAttempts {
			return resp, err
		}
		for _, it := range batch {
			it.retried = true
		}
		u.o.Log.Warn("undelete: a transaction failed; trying again (its guards make that safe)", "cluster", u.o.ClusterID,
			"keys", len(batch), "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
}

// tooLarge: the server (or the client's own bound) refused the request
// for its size or its number of operations.
func tooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return true
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.ResourceExhausted {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "too many operations in txn request") || strings.Contains(msg, "request is too large") ||
		strings.Contains(msg, "trying to send message larger than max")
}

// verify reads back every key written, now and, when Kubernetes objects
// were written and Settle is set, once more after Settle, so that a
// controller that deletes them again (a namespace still being deleted, the
// garbage collector finding an owner gone) is seen: a key deleted again is
// ActionDeletedAgain and fails the run. A key changed since it was written
// is a warning only (controllers update the objects they find).
func (u *run) verify(ctx context.Context) error {
	changed, err := u.readBack(ctx)
	if err != nil {
		return err
	}
	if u.o.Settle > 0 && u.wroteKube() {
		u.o.Log.Info("undelete: written; reading back again after the settle time, for controllers that would delete them again",
			"cluster", u.o.ClusterID, "settle", u.o.Settle)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(u.o.Settle):
		}
		if changed, err = u.readBack(ctx); err != nil {
			return err
		}
	}
	if len(changed) > 0 {
		u.warn("%d key(s) written were changed since (not undone): %s%s", len(changed), strings.Join(changed[:min(len(changed), 5)], "; "),
			more(len(changed)-min(len(changed), 5)))
	}
	n := 0
	for _, it := range u.items {
		if it.res.Action == ActionDeletedAgain {
			n++
		}
	}
	if n > 0 {
		return u.fail(StepVerify, fmt.Errorf("%d key(s) were deleted again after they were written (a namespace or definition being "+
			"deleted, the garbage collector finding their owner gone, or someone): action deleted-again in the report", n))
	}
	return nil
}

// wroteKube: a Kubernetes object was written.
func (u *run) wroteKube() bool {
	for _, it := range u.items {
		if it.res.Written > 0 && it.meta.Decoded {
			return true
		}
	}
	return false
}

// readBack reads every key written (or deleted again since): one deleted
// is ActionDeletedAgain; one that reads back at the revision it was
// written with other bytes is an error. It returns the keys changed since.
func (u *run) readBack(ctx context.Context) ([]string, error) {
	var written []*item
	for _, it := range u.items {
		if it.res.Written > 0 {
			written = append(written, it)
		}
	}
	var changed []string
	err := u.getAll(ctx, len(written), func(i int) string { return string(written[i].kv.Key) },
		func(i int) int { return itemSize(written[i]) }, func(i int, kv *mvccpb.KeyValue) error {
			it := written[i]
			switch {
			case kv == nil:
				it.res.Action = ActionDeletedAgain
				it.res.Reason = fmt.Sprintf("written at revision %d, then deleted again before the run ended", it.res.Written)
			case kv.ModRevision == it.res.Written && !bytes.Equal(kv.Value, it.kv.Value):
				return fmt.Errorf("key %q reads back at the revision it was written with other bytes", it.kv.Key)
			case !bytes.Equal(kv.Value, it.kv.Value):
				changed = append(changed, fmt.Sprintf("%s (revision %d)", it.kv.Key, kv.ModRevision))
			}
			return nil
		})
	if err != nil {
		return nil, u.fail(StepVerify, err)
	}
	return changed, nil
}
