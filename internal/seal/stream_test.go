package seal_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/seal"
)

// identities parses the given age identities as an identity file would.
func identities(tb testing.TB, ids ...*age.X25519Identity) *seal.Identities {
	tb.Helper()
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(keygenFile(id))
	}
	out, err := seal.ParseIdentities(strings.NewReader(sb.String()), "test-identities")
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func recipients(tb testing.TB, pubs ...string) seal.Recipients {
	tb.Helper()
	rs, err := seal.ParseRecipients(pubs)
	if err != nil {
		tb.Fatal(err)
	}
	return rs
}

func seal1(tb testing.TB, plain []byte, rs seal.Recipients) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := seal.Encrypt(&buf, rs)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// open decrypts all of ct; the error is from Decrypt or from reading.
func open(ct []byte, ids *seal.Identities, want []string) ([]byte, error) {
	r, err := seal.Decrypt(bytes.NewReader(ct), ids, want)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTripTwoRecipients(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	b, pubB := newKey(t)
	c, pubC := newKey(t)
	rs := recipients(t, pubA, pubB)
	want := rs.Strings()
	plain := randomBytes(300<<10, 1) // several 64 KiB chunks and a short last one
	ct := seal1(t, plain, rs)
	if bytes.Contains(ct, plain[:64]) {
		t.Fatal("ciphertext contains plaintext")
	}
	if ok, err := seal.Sniff(bufio.NewReader(bytes.NewReader(ct))); !ok || err != nil {
		t.Fatalf("Sniff(ciphertext) = %v, %v", ok, err)
	}
	if ok, _ := seal.Sniff(bufio.NewReader(bytes.NewReader(plain))); ok {
		t.Fatal("Sniff(plaintext) = true")
	}
	for name, ids := range map[string]*seal.Identities{"A": identities(t, a), "B": identities(t, b), "C then B": identities(t, c, b)} {
		got, err := open(ct, ids, want)
		if err != nil {
			t.Fatalf("identity %s: %v", name, err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("identity %s: plaintext differs", name)
		}
	}
	_, err := open(ct, identities(t, c), want)
	if !errors.Is(err, seal.ErrNoIdentity) || errors.Is(err, seal.ErrTampered) {
		t.Fatalf("third identity: err = %v, want ErrNoIdentity", err)
	}
	var nm *seal.NoMatchError
	if !errors.As(err, &nm) {
		t.Fatalf("third identity: %T, want *NoMatchError", err)
	}
	for _, s := range []string{pubA, pubB, pubC} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if strings.Contains(strings.ToUpper(err.Error()), "AGE-SECRET-KEY") {
		t.Fatalf("error shows a secret key: %v", err)
	}
	t.Logf("wrong identity: %v", err)
	if _, err := seal.Decrypt(bytes.NewReader(ct), nil, want); err == nil || !strings.Contains(err.Error(), "--identity-file") {
		t.Fatalf("no identity: err = %v", err)
	}
	if _, err := seal.Encrypt(io.Discard, seal.Recipients{}); !errors.Is(err, seal.ErrNoRecipients) {
		t.Fatalf("Encrypt without recipients: %v", err)
	}
	// An empty plaintext round-trips too.
	if got, err := open(seal1(t, nil, rs), identities(t, a), want); err != nil || len(got) != 0 {
		t.Fatalf("empty plaintext: %q, %v", got, err)
	}
}

// headerLen is the length of the age header (through the "---" MAC line).
func headerLen(tb testing.TB, ct []byte) int {
	tb.Helper()
	i := bytes.Index(ct, []byte("\n---"))
	if i < 0 {
		tb.Fatal("no header end")
	}
	return i + 1 + bytes.IndexByte(ct[i+1:], '\n') + 1
}

// TestTamperedCiphertext flips every byte of the header (and of the
// payload nonce), one at a time, and bytes across the payload: each must
// be refused as ErrTampered, never decrypted, never taken for a wrong
// identity, never a retryable io.ErrUnexpectedEOF.
func TestTamperedCiphertext(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	_, pubB := newKey(t)
	rs := recipients(t, pubA, pubB)
	want := rs.Strings()
	ids := identities(t, a)
	plain := randomBytes(200<<10, 2)
	ct := seal1(t, plain, rs)
	hl := headerLen(t, ct)
	details := map[string]int{}
	check := func(where string, pos int, bad []byte) {
		t.Helper()
		got, err := open(bad, ids, want)
		if err == nil {
			if bytes.Equal(got, plain) {
				t.Fatalf("%s byte %d flipped: decrypted to the original plaintext", where, pos)
			}
			t.Fatalf("%s byte %d flipped: no error", where, pos)
		}
		if !errors.Is(err, seal.ErrTampered) || errors.Is(err, seal.ErrNoIdentity) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s byte %d flipped: err = %v, want only ErrTampered", where, pos, err)
		}
		var te *seal.TamperError
		errors.As(err, &te)
		details[where+": "+te.Part+": "+firstWords(te.Detail)]++
	}
	for pos := 0; pos < hl+16; pos++ {
		where := "header"
		if pos >= hl {
			where = "nonce"
		}
		bad := bytes.Clone(ct)
		bad[pos] ^= 0x01
		check(where, pos, bad)
	}
	for _, pos := range []int{hl + 16, hl + 16 + 65536 + 15, len(ct) / 2, len(ct) - 17, len(ct) - 1} {
		bad := bytes.Clone(ct)
		bad[pos] ^= 0x80
		check("payload", pos, bad)
	}
	for d, n := range details {
		t.Logf("%4d × %s", n, d)
	}
	// Without the manifest's recipients, a damaged stanza cannot be told
	// from a wrong identity: it is reported as no match (documented).
	bad := bytes.Clone(ct)
	bad[bytes.Index(ct, []byte("X25519 "))+10] ^= 0x01
	if _, err := open(bad, ids, nil); !errors.Is(err, seal.ErrNoIdentity) && !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("stanza damage without recipients: %v", err)
	}
}

func firstWords(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

func TestTruncatedCiphertext(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	rs := recipients(t, pubA)
	ids := identities(t, a)
	plain := randomBytes(200<<10, 3)
	ct := seal1(t, plain, rs)
	hl := headerLen(t, ct)
	const chunk = 64<<10 + 16
	for _, n := range []int{0, 10, hl / 2, hl - 1, hl, hl + 8, hl + 16, hl + 16 + 100, hl + 16 + chunk, hl + 16 + 2*chunk, hl + 16 + 2*chunk + 1, len(ct) - 16, len(ct) - 1} {
		_, err := open(ct[:n], ids, rs.Strings())
		if !errors.Is(err, seal.ErrTampered) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d of %d: err = %v, want ErrTampered", n, len(ct), err)
		}
		t.Logf("cut at %6d: %v", n, err)
	}
	// Trailing data after the last chunk.
	if _, err := open(append(bytes.Clone(ct), 0), ids, rs.Strings()); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("trailing byte: err = %v", err)
	}
	// A plaintext object where a sealed one was expected.
	if _, err := open(plain, ids, rs.Strings()); !errors.Is(err, seal.ErrTampered) || !strings.Contains(err.Error(), "header") {
		t.Fatalf("plaintext: err = %v", err)
	}
}

// failingReader returns err after n bytes: a transport failure.
type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// TestTransportErrorIsNotTampering: an error of the source reader is
// returned as it is (a retry may help), not as ErrTampered.
func TestTransportErrorIsNotTampering(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	rs := recipients(t, pubA)
	ct := seal1(t, randomBytes(200<<10, 4), rs)
	errNet := fmt.Errorf("connection reset by peer: %w", io.ErrUnexpectedEOF)
	for _, n := range []int{20, headerLen(t, ct) + 40, 150 << 10} {
		_, err := open(nil, nil, nil) // keep the helper honest: nil identities fail
		if err == nil {
			t.Fatal("no identities accepted")
		}
		r, err := seal.Decrypt(&failingReader{r: bytes.NewReader(ct), n: n, err: errNet}, identities(t, a), rs.Strings())
		if err == nil {
			_, err = io.ReadAll(r)
		}
		if !errors.Is(err, errNet) || errors.Is(err, seal.ErrTampered) {
			t.Fatalf("transport error after %d bytes: err = %v, want the transport error", n, err)
		}
	}
}

// TestStreamingHeapBounded: 256 MiB encrypted into an io.Pipe and
// decrypted from it keeps the heap flat: age works in 64 KiB chunks.
func TestStreamingHeapBounded(t *testing.T) {
	// Not parallel: it measures the process's heap.
	const total = 256 << 20
	a, pubA := newKey(t)
	rs := recipients(t, pubA)
	ids := identities(t, a)
	block := randomBytes(1<<20, 5)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse

	pr, pw := io.Pipe()
	wantSum := make(chan []byte, 1)
	go func() {
		h := sha256.New()
		w, err := seal.Encrypt(pw, rs)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		for off := 0; off < total; off += len(block) {
			block[0] = byte(off >> 20) // every MiB differs
			h.Write(block)
			if _, err := w.Write(block); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		wantSum <- h.Sum(nil)
		pw.CloseWithError(w.Close())
	}()
	r, err := seal.Decrypt(pr, ids, rs.Strings())
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var n, peak, retained uint64
	for {
		k, err := r.Read(buf)
		h.Write(buf[:k])
		n += uint64(k)
		if n%(16<<20) < uint64(k) { // about every 16 MiB
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			// What the stream holds on to, without the garbage the GC
			// has not collected yet.
			runtime.GC()
			runtime.ReadMemStats(&ms)
			retained = max(retained, ms.HeapInuse)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != total {
		t.Fatalf("decrypted %d bytes, want %d", n, total)
	}
	if !bytes.Equal(h.Sum(nil), <-wantSum) {
		t.Fatal("sha256 of the decrypted stream differs")
	}
	t.Logf("256 MiB through age and back: HeapInuse %.1f MiB before; while streaming, peak %.1f MiB (+%.1f), after a GC at most %.1f MiB (+%.2f)",
		mib(base), mib(peak), mib(peak-base), mib(retained), mib(retained-base))
	// Retained: the writer's and reader's chunk buffers and the pipe, well
	// under 1 MiB. Peak: plus garbage (age allocates each 64 KiB chunk)
	// up to the GC's minimum 4 MiB heap goal.
	if retained > base+2<<20 {
		t.Fatalf("streaming 256 MiB retains %.1f MiB of heap: not bounded", mib(retained-base))
	}
	if peak > base+12<<20 {
		t.Fatalf("heap in use grew by %.1f MiB while streaming 256 MiB: not bounded", mib(peak-base))
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
