package etcdinternals

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A snapshot is a bbolt file written by etcd's Tx.WriteTo. etcd runs bbolt
// with NoFreelistSync, so the file carries no freelist: whoever opens it
// for writing must find the free pages by walking every page of the
// database through the memory map, and etcdutl's restore code opens each
// member's copy four times. PrepareSnapshot finds the free pages once,
// with plain reads of the file (no map, so they stay out of the process's
// resident memory), and writes them as a freelist: every later open reads
// that instead. It then applies the revision bump once, to the staged
// file, so that each member's copy needs no walk of the key bucket.
//
// The on-disk structures below are bbolt's (go.etcd.io/bbolt page.go,
// db.go), in the machine's byte order as bbolt writes them; bbolt's own
// Tx.Check is the judge in the tests.

const (
	boltPageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize    = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltMetaSize       = 64 // magic, version, pageSize, flags u32; root{pgid, seq u64}; freelist, pgid, txid, checksum u64
	boltMetaSumLen     = 56 // the checksum covers the meta up to itself

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltMetaPage     = 0x04
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01

	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltNoFreelist = ^uint64(0)
)

var boltOrder = binary.NativeEndian

// boltMeta is the part of a meta page that PrepareSnapshot reads or writes.
type boltMeta struct {
	raw      []byte // the whole page
	pageSize uint32
	root     uint64
	freelist uint64
	hwm      uint64 // high-water mark: pages [0, hwm) are in use or free
	txid     uint64
}

func readBoltMeta(f *os.File, off int64, pageSize int) (*boltMeta, error) {
	buf := make([]byte, pageSize)
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, err
	}
	m := buf[boltPageHeaderSize:]
	if boltOrder.Uint16(buf[8:]) != boltMetaPage {
		return nil, errors.New("not a meta page")
	}
	if boltOrder.Uint32(m[0:]) != boltMagic || boltOrder.Uint32(m[4:]) != boltVersion {
		return nil, errors.New("not a bbolt database (magic or version)")
	}
	h := fnv.New64a()
	h.Write(m[:boltMetaSumLen])
	if h.Sum64() != boltOrder.Uint64(m[boltMetaSumLen:]) {
		return nil, errors.New("meta page checksum mismatch")
	}
	return &boltMeta{raw: buf, pageSize: boltOrder.Uint32(m[8:]), root: boltOrder.Uint64(m[16:]),
		freelist: boltOrder.Uint64(m[32:]), hwm: boltOrder.Uint64(m[40:]), txid: boltOrder.Uint64(m[48:])}, nil
}

// setFreelist points a meta page at a freelist and a new high-water mark
// and seals it with a new checksum.
func (bm *boltMeta) setFreelist(freelist, hwm uint64) {
	m := bm.raw[boltPageHeaderSize:]
	boltOrder.PutUint64(m[32:], freelist)
	boltOrder.PutUint64(m[40:], hwm)
	h := fnv.New64a()
	h.Write(m[:boltMetaSumLen])
	boltOrder.PutUint64(m[boltMetaSumLen:], h.Sum64())
}

// boltPages reads pages of a bbolt file with pread.
type boltPages struct {
	f        *os.File
	pageSize int
	hwm      uint64
	buf      []byte
}

// read returns n bytes of page id, starting at its header, after checking
// that the header is the page's own.
func (p *boltPages) read(id uint64, n int) ([]byte, error) {
	if id < 2 || id >= p.hwm {
		return nil, fmt.Errorf("page %d is outside the database (high-water mark %d)", id, p.hwm)
	}
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	b := p.buf[:n]
	if _, err := p.f.ReadAt(b, int64(id)*int64(p.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := boltOrder.Uint64(b); got != id {
		return nil, fmt.Errorf("page %d: header says page %d", id, got)
	}
	return b, nil
}

// reachablePages marks every page reachable from the root bucket, as
// bbolt's own freelist rebuild (DB.freepages) does: each branch and leaf
// page with its overflow, and the pages of every non-inline bucket.
func reachablePages(p *boltPages, root uint64) ([]uint64, error) {
	seen := make([]uint64, (p.hwm+63)/64)
	mark := func(id uint64) bool {
		if seen[id/64]&(1<<(id%64)) != 0 {
			return false
		}
		seen[id/64] |= 1 << (id % 64)
		return true
	}
	stack := []uint64{root}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		hdr, err := p.read(id, boltPageHeaderSize)
		if err != nil {
			return nil, err
		}
		flags, count, overflow := boltOrder.Uint16(hdr[8:]), int(boltOrder.Uint16(hdr[10:])), uint64(boltOrder.Uint32(hdr[12:]))
		if id+overflow >= p.hwm {
			return nil, fmt.Errorf("page %d: %d overflow pages run past the high-water mark %d", id, overflow, p.hwm)
		}
		for i := uint64(0); i <= overflow; i++ {
			if !mark(id + i) {
				return nil, fmt.Errorf("page %d is reached twice", id+i)
			}
		}
		span := int(overflow+1) * p.pageSize
		if boltPageHeaderSize+count*boltElementSize > span {
			return nil, fmt.Errorf("page %d: %d elements do not fit in %d bytes", id, count, span)
		}
		switch flags {
		case boltBranchPage:
			b, err := p.read(id, boltPageHeaderSize+count*boltElementSize)
			if err != nil {
				return nil, err
			}
			for i := range count {
				stack = append(stack, boltOrder.Uint64(b[boltPageHeaderSize+i*boltElementSize+8:]))
			}
		case boltLeafPage:
			elems := boltPageHeaderSize + count*boltElementSize
			b, err := p.read(id, elems)
			if err != nil {
				return nil, err
			}
			var buckets []int // offsets of bucket headers in the page
			for i := range count {
				e := b[boltPageHeaderSize+i*boltElementSize:]
				if boltOrder.Uint32(e)&boltBucketLeaf == 0 {
					continue
				}
				off := boltPageHeaderSize + i*boltElementSize + int(boltOrder.Uint32(e[4:])) + int(boltOrder.Uint32(e[8:]))
				if off+16 > span {
					return nil, fmt.Errorf("page %d: bucket %d lies outside the page", id, i)
				}
				buckets = append(buckets, off)
			}
			if len(buckets) == 0 {
				continue
			}
			b, err = p.read(id, span)
			if err != nil {
				return nil, err
			}
			for _, off := range buckets {
				// An inline bucket (root 0) lives inside the value and,
				// being inline, holds no buckets of its own.
				if r := boltOrder.Uint64(b[off:]); r != 0 {
					stack = append(stack, r)
				}
			}
		default:
			return nil, fmt.Errorf("page %d: flags %#x, where a branch or leaf page belongs", id, flags)
		}
	}
	return seen, nil
}

// SyncFreelist gives a bbolt file without a freelist (NoFreelistSync, as
// etcd writes them) one, placed after its last page, and drops anything
// after the database (etcd's 32-byte sha256 trailer). It returns the
// number of free pages. A file that already has a freelist is left as it
// is, apart from the trailer. Its steps: readMetas, checkSnapshotShape,
// freePageIDs, encodeFreelist, then writeFreelist.
func SyncFreelist(path string) (free int, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	pageSize, metas, cur, metaErrs, err := readMetas(f)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := int64(cur.hwm) * int64(pageSize)
	if cur.freelist != boltNoFreelist {
		// Written by bbolt with a freelist already: only etcd's trailer
		// may go.
		if st.Size() == end+sha256.Size {
			return 0, f.Truncate(end)
		}
		return 0, nil
	}
	if err := checkSnapshotShape(metas, metaErrs, cur, pageSize, st.Size()); err != nil {
		return 0, err
	}
	ids, err := freePageIDs(&boltPages{f: f, pageSize: pageSize, hwm: cur.hwm}, cur)
	if err != nil {
		return 0, err
	}
	page, npages := encodeFreelist(ids, cur.hwm, pageSize)
	if err := writeFreelist(f, page, end, metas, cur.hwm, npages, pageSize); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// readMetas is SyncFreelist's first step: page 0 tells the page size, and
// the newer valid meta page, cur, is the database, as bbolt reads it.
// metaErrs are the meta pages that are not valid (cur is the other).
func readMetas(f *os.File) (pageSize int, metas [2]*boltMeta, cur *boltMeta, metaErrs []error, err error) {
	// Page 0 tells the page size; both meta pages must be valid, as
	// Tx.WriteTo writes them.
	first := make([]byte, boltPageHeaderSize+boltMetaSize)
	if _, err := f.ReadAt(first, 0); err != nil {
		return 0, metas, nil, nil, fmt.Errorf("read meta page 0: %w", err)
	}
	pageSize = int(boltOrder.Uint32(first[boltPageHeaderSize+8:]))
	if pageSize < 1024 || pageSize > 1<<20 || pageSize&(pageSize-1) != 0 {
		return 0, metas, nil, nil, fmt.Errorf("implausible page size %d", pageSize)
	}
	// The newer valid meta page is the database, as bbolt reads it.
	for i := range metas {
		m, err := readBoltMeta(f, int64(i*pageSize), pageSize)
		if err != nil {
			metaErrs = append(metaErrs, fmt.Errorf("meta page %d: %w", i, err))
			continue
		}
		metas[i] = m
		if cur == nil || m.txid > cur.txid {
			cur = m
		}
	}
	if cur == nil {
		return 0, metas, nil, nil, errors.Join(metaErrs...)
	}
	return pageSize, metas, cur, metaErrs, nil
}

// checkSnapshotShape is SyncFreelist's second step, for a file without a
// freelist: Tx.WriteTo writes two valid meta pages of the same tree, and
// then exactly the pages below the high-water mark (and etcd its hash).
func checkSnapshotShape(metas [2]*boltMeta, metaErrs []error, cur *boltMeta, pageSize int, size int64) error {
	if len(metaErrs) > 0 {
		return errors.Join(metaErrs...)
	}
	if metas[0].root != metas[1].root || metas[0].hwm != metas[1].hwm {
		return errors.New("the two meta pages describe different trees: not a snapshot as etcd writes them")
	}
	end := int64(cur.hwm) * int64(pageSize)
	switch size {
	case end, end + sha256.Size:
	default:
		return fmt.Errorf("file is %d bytes, the database %d (%d pages of %d): truncated or padded", size, end, cur.hwm, pageSize)
	}
	return nil
}

// freePageIDs is SyncFreelist's third step: the pages below the
// high-water mark that the tree does not reach, ascending, as bbolt keeps
// them.
func freePageIDs(pages *boltPages, cur *boltMeta) ([]uint64, error) {
	seen, err := reachablePages(pages, cur.root)
	if err != nil {
		return nil, fmt.Errorf("walk the database: %w", err)
	}
	var ids []uint64 // ascending, as bbolt keeps them
	for id := uint64(2); id < cur.hwm; id++ {
		if seen[id/64]&(1<<(id%64)) == 0 {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// encodeFreelist is SyncFreelist's fourth step: the freelist page (npages
// pages long, placed at page hwm) holding ids.
func encodeFreelist(ids []uint64, hwm uint64, pageSize int) (page []byte, npages int) {
	// The freelist page: a header, then the ids; from 0xFFFF ids on the
	// count is 0xFFFF and the real count is the first element.
	n := len(ids)
	words := n
	if n >= 0xFFFF {
		words++
	}
	npages = (boltPageHeaderSize + words*8 + pageSize - 1) / pageSize
	page = make([]byte, npages*pageSize)
	boltOrder.PutUint64(page[0:], hwm)
	boltOrder.PutUint16(page[8:], boltFreelistPage)
	boltOrder.PutUint32(page[12:], uint32(npages-1))
	body := page[boltPageHeaderSize:]
	if n >= 0xFFFF {
		boltOrder.PutUint16(page[10:], 0xFFFF)
		boltOrder.PutUint64(body, uint64(n))
		body = body[8:]
	} else {
		boltOrder.PutUint16(page[10:], uint16(n))
	}
	for i, id := range ids {
		boltOrder.PutUint64(body[i*8:], id)
	}
	return page, npages
}

// writeFreelist is SyncFreelist's last step: the freelist page at end
// (the file cut after it), then the meta pages, which make it part of the
// file.
func writeFreelist(f *os.File, page []byte, end int64, metas [2]*boltMeta, hwm uint64, npages, pageSize int) error {
	if _, err := f.WriteAt(page, end); err != nil {
		return fmt.Errorf("write freelist: %w", err)
	}
	if err := f.Truncate(end + int64(len(page))); err != nil {
		return err
	}
	// Then the meta pages, which make the freelist part of the file.
	// Nothing is synced: the file is a staging copy that is deleted once
	// etcdutl has copied it into the data dirs, and bbolt syncs those.
	for i, m := range metas {
		m.setFreelist(hwm, hwm+uint64(npages))
		if _, err := f.WriteAt(m.raw, int64(i*pageSize)); err != nil {
			return fmt.Errorf("write meta page %d: %w", i, err)
		}
	}
	return nil
}

// BumpRevision is etcdutl's --bump-revision with --mark-compacted, applied
// once to the staged snapshot rather than to each member's copy: it adds
// an empty key at the latest revision plus amount and schedules a
// compaction there, so that the rebuilt cluster's revisions only go up
// and watchers that were behind are told to start over. The latest
// revision is the last key of the "key" bucket (revisions sort as bytes),
// found without reading the rest. It returns the new latest revision.
//
// Without mark (a drill, which compacts through the API after hashing the
// snapshot's revision), only the empty key is added, as etcdutl's
// --bump-revision alone does.
func BumpRevision(path string, amount uint64, mark bool) (int64, error) {
	opts := restoreBoltOptions
	opts.Timeout = 10 * time.Second
	// A staging copy, as in SyncFreelist: no fdatasync at commit, and none
	// when the file grows (which would flush the whole file to disk).
	opts.NoSync, opts.NoGrowSync = true, true
	db, err := bolt.Open(path, 0o600, &opts)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	var latest int64
	err = db.Update(func(tx *bolt.Tx) error {
		kb := tx.Bucket(KeyBucket)
		if kb == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		last, _ := kb.Cursor().Last()
		if last != nil && len(last) < RevBytesLen {
			return fmt.Errorf("last key of the key bucket is %d bytes, not a revision", len(last))
		}
		if last != nil {
			latest = int64(binary.BigEndian.Uint64(last[:8]))
		}
		latest += int64(amount)
		rev := make([]byte, RevBytesLen)
		binary.BigEndian.PutUint64(rev, uint64(latest))
		rev[8] = '_'
		if err := kb.Put(rev, []byte{}); err != nil {
			return err
		}
		if !mark {
			return nil
		}
		mb, err := tx.CreateBucketIfNotExists(MetaBucket)
		if err != nil {
			return err
		}
		// A fresh slice: bbolt keeps a reference until the commit.
		return mb.Put(ScheduledCompactKey, slices.Clone(rev))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return latest, err
}

// PrepareSnapshot readies a verified snapshot file for etcdutl's restore:
// it gets a freelist, loses etcd's trailer, and, when asked, takes the
// revision bump (amount bump; markCompacted also schedules a compaction
// there, as etcdutl's --mark-compacted). Each member's restore then copies
// it and opens it without walking it, with no RevisionBump of its own.
//
// With [Enabled] false a restore does not call it: etcdutl's own
// RevisionBump and MarkCompacted do the bump in each member's copy.
func PrepareSnapshot(path string, bump uint64, markCompacted bool, log *slog.Logger) error {
	t := time.Now()
	free, err := SyncFreelist(path)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", path, err)
	}
	log.Debug("freelist written", "free_pages", free, "duration", time.Since(t).Round(time.Millisecond))
	if bump > 0 {
		t = time.Now()
		latest, err := BumpRevision(path, bump, markCompacted)
		if err != nil {
			return fmt.Errorf("bump the revision of %s: %w", path, err)
		}
		log.Debug("revision bumped", "revision", latest, "marked_compacted", markCompacted, "duration", time.Since(t).Round(time.Millisecond))
	}
	return nil
}
