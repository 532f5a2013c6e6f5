package testfix

import (
	"bytes"
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/armada/etcd-recovery/internal/store"
)

// privateKeyHeader ends every PEM private key header.
var privateKeyHeader = []byte("PRIVATE KEY-----")

// base64Run is a run of base64 long enough to hold a PEM header.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{24,}={0,2}`)

// HoldsPrivateKey says whether b holds a PEM private key header, as it
// is or base64-encoded at any alignment (a Secret's data in JSON).
func HoldsPrivateKey(b []byte) bool {
	if bytes.Contains(b, privateKeyHeader) {
		return true
	}
	for _, run := range base64Run.FindAll(b, -1) {
		for cut := 0; cut < 4 && cut < len(run); cut++ {
			s := strings.TrimRight(string(run[cut:]), "=")
			s = s[:len(s)/4*4]
			if d, err := base64.StdEncoding.DecodeString(s); err == nil && bytes.Contains(d, privateKeyHeader) {
				return true
			}
		}
	}
	return false
}

// PlaintextPrivateKeys searches every object under prefix for a private
// key in plaintext (HoldsPrivateKey): manifests and records as they are,
// zstd objects decompressed; age objects are sealed and counted. It
// returns how many objects it read, how many were sealed, and the keys of
// those that hold one.
func PlaintextPrivateKeys(tb testing.TB, ctx context.Context, st store.Store, prefix string) (searched, sealed int, found []string) {
	tb.Helper()
	objs, err := st.List(ctx, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range objs {
		b := ReadObject(tb, st, o.Key)
		if bytes.HasPrefix(b, []byte("age-encryption.org/v1\n")) {
			sealed++
			continue
		}
		if strings.HasSuffix(o.Key, ".zst") {
			d, err := zstd.NewReader(nil)
			if err != nil {
				tb.Fatal(err)
			}
			b, err = d.DecodeAll(b, nil)
			d.Close()
			if err != nil {
				tb.Fatalf("%s: %v", o.Key, err)
			}
		}
		if HoldsPrivateKey(b) {
			found = append(found, o.Key)
		}
	}
	return len(objs), sealed, found
}
