package seal_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/seal"
)

// writeIdentityFile writes content to a file of the given mode.
func writeIdentityFile(tb testing.TB, content string, mode os.FileMode) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "identity")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tb.Fatal(err)
	}
	return p
}

// keygenFile is a file as age-keygen writes it.
func keygenFile(id *age.X25519Identity) string {
	return fmt.Sprintf("# created: 2026-01-02T03:04:05Z\n# public key: %s\n%s\n", id.Recipient(), id)
}

func TestReadIdentityFile(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	b, pubB := newKey(t)
	p := writeIdentityFile(t, keygenFile(a)+"\n"+keygenFile(b)+keygenFile(a), 0o400)
	ids, err := seal.ReadIdentityFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if ids.Len() != 2 || ids.Recipients()[0] != pubA || ids.Recipients()[1] != pubB || ids.Warning != "" {
		t.Fatalf("identities %v, warning %q", ids.Recipients(), ids.Warning)
	}
	// Printing identities, with any verb, shows public keys only.
	for _, out := range []string{fmt.Sprint(ids), fmt.Sprintf("%v %+v %#v %s %q", ids, ids, ids, ids, ids), ids.String()} {
		if strings.Contains(out, a.String()) || strings.Contains(out, b.String()) || strings.Contains(strings.ToUpper(out), "AGE-SECRET-KEY") {
			t.Fatalf("printing identities shows a secret key: %s", out)
		}
		if !strings.Contains(out, pubA) {
			t.Fatalf("printing identities does not name the public key: %s", out)
		}
	}

	// Group-readable (a Secret volume with an fsGroup): accepted with a warning.
	ids, err = seal.ReadIdentityFile(writeIdentityFile(t, keygenFile(a), 0o440))
	if err != nil || !strings.Contains(ids.Warning, "0440") {
		t.Fatalf("mode 0440: err %v, warning %q", err, ids.Warning)
	}
	// Others may read it: refused, naming the file and mode.
	for _, mode := range []os.FileMode{0o644, 0o604, 0o401} {
		p := writeIdentityFile(t, keygenFile(a), mode)
		_, err := seal.ReadIdentityFile(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode)) {
			t.Fatalf("mode %04o: err = %v, want a refusal naming the file and mode", mode, err)
		}
	}
	if _, err := seal.ReadIdentityFile(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestIdentityErrorsNeverShowKeyMaterial: broken identity files holding
// real keys; no error may contain the key or a recognisable part of it.
func TestIdentityErrorsNeverShowKeyMaterial(t *testing.T) {
	t.Parallel()
	a, _ := newKey(t)
	b, _ := newKey(t)
	ka, kb := a.String(), b.String()
	pq, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, content, errHas string
		secrets               []string
	}{
		{"bad checksum on line 4", keygenFile(a) + kb[:len(kb)-1] + flipUpper(kb[len(kb)-1]) + "\n", "line 4", []string{ka, kb}},
		{"truncated key", keygenFile(a) + kb[:50] + "\n", "line 4", []string{ka, kb}},
		{"bad character", keygenFile(a) + kb[:30] + "!" + kb[31:] + "\n", "line 4", []string{ka, kb}},
		{"trailing garbage", keygenFile(a) + kb + " extra\n", "line 4", []string{ka, kb}},
		{"key and public key on one line", ka + " " + a.Recipient().String() + "\n", "line 1", []string{ka}},
		{"mixed case", ka[:40] + strings.ToLower(ka[40:]) + "\n", "line 1", []string{ka, strings.ToLower(ka)}},
		{"leading junk", "x" + ka + "\n", "line 1", []string{ka}},
		{"post-quantum", "# pq\n" + pq.String() + "\n" + ka + "\n", "line 2", []string{pq.String(), ka}},
		{"recipient instead", a.Recipient().String() + "\n", "line 1", nil},
		{"ssh private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n", "line 1", []string{"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"}},
		{"only comments", "# " + ka + "\n", "no identities", []string{ka}},
		{"too long", ka + "\n" + strings.Repeat("#"+kb+"\n", 2000), "larger than", []string{ka, kb}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeIdentityFile(t, tc.content, 0o400)
			_, err := seal.ReadIdentityFile(p)
			if err == nil {
				t.Fatal("broken identity file accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, p) || !strings.Contains(msg, tc.errHas) {
				t.Errorf("error %q should name the file and %q", msg, tc.errHas)
			}
			for _, s := range tc.secrets {
				// The whole key, and any 12-character piece of its data part.
				data := s[strings.LastIndexByte(s, '1')+1:]
				for i := 0; i+12 <= len(data); i++ {
					if strings.Contains(strings.ToUpper(msg), strings.ToUpper(data[i:i+12])) {
						t.Fatalf("error shows key material %q: %s", data[i:i+12], msg)
					}
				}
			}
		})
	}
}

func flipUpper(c byte) string {
	if c == 'Q' {
		return "P"
	}
	return "Q"
}
