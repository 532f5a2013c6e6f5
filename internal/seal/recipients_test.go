package seal_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/seal"
)

// newKey returns a fresh X25519 identity and its recipient string.
func newKey(tb testing.TB) (*age.X25519Identity, string) {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	return id, id.Recipient().String()
}

func TestParseRecipientsFile(t *testing.T) {
	t.Parallel()
	idA, a := newKey(t)
	_, b := newKey(t)
	pq, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	const sshEd = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHsKLqeplhpuf0ORoGqzrKrUPGrBXBZOt3ZFdC5ksJBd sre@example"
	const plugin = "age1yubikey1qwt50d05nh5vutpdzmlg5wn80xq5negm4uj9ghv0snvdd3yysf5yw3rhl3t"
	tests := []struct {
		name    string
		content string
		want    []string // sorted
		errHas  []string // substrings of the error; nil: no error
		errNot  []string
	}{
		{"comments and blanks", "# team sre\n\n" + a + "\n   \n# rotation 2026\n" + b + "\n", sorted(a, b), nil, nil},
		{"crlf and indentation", "  " + a + "\r\n\t" + b + "\r\n", sorted(a, b), nil, nil},
		{"duplicates", a + "\n" + b + "\n" + a + "\n" + strings.ToUpper(a) + "\n", sorted(a, b), nil, nil},
		{"only comments", "# nothing here\n\n", nil, []string{"recipients.txt", "no recipients"}, nil},
		{"empty", "", nil, []string{"no recipients"}, nil},
		{"ssh key refused", a + "\n" + sshEd + "\n", nil, []string{"recipients.txt, line 2", "SSH keys are not supported"}, nil},
		{"post-quantum refused", "# pq\n" + pq.Recipient().String() + "\n", nil, []string{"line 2", "post-quantum"}, nil},
		{"plugin refused", plugin + "\n", nil, []string{"line 1", "plugin recipients", "age1yubikey1"}, nil},
		{"bad checksum", "\n\n" + a[:len(a)-1] + flip(a[len(a)-1]) + "\n", nil, []string{"line 3", "malformed age recipient", "checksum"}, nil},
		{"garbage", "hello world\n", nil, []string{"line 1", "not an age X25519 recipient"}, nil},
		{"secret key by mistake", idA.String() + "\n", nil, []string{"line 1", "secret key"}, []string{idA.String(), idA.String()[20:40]}},
		{"inline comment is not allowed", a + " # alice\n", nil, []string{"line 1"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := seal.ParseRecipientsFile(strings.NewReader(tc.content), "recipients.txt")
			if tc.errHas == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got := rs.Strings(); !slices.Equal(got, tc.want) {
					t.Fatalf("recipients = %v, want %v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, got recipients %v", rs.Strings())
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			for _, s := range tc.errNot {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains %q", err, s)
				}
			}
		})
	}
}

func flip(c byte) string {
	if c == 'q' {
		return "p"
	}
	return "q"
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestLoadRecipientsMergesFlagsFilesAndEnv(t *testing.T) {
	t.Parallel()
	_, a := newKey(t)
	_, b := newKey(t)
	_, c := newKey(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "recipients")
	if err := os.WriteFile(file, []byte("# ops\n"+b+"\n"+c+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := seal.LoadRecipients([]string{a + "," + b, " " + c + " "}, []string{file})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs.Strings(), sorted(a, b, c); !slices.Equal(got, want) {
		t.Fatalf("merged = %v, want %v", got, want)
	}
	env := map[string]string{seal.EnvEncryptTo: a + " " + b, seal.EnvRecipientsFile: file}
	rs, err = seal.RecipientsFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs.Strings(), sorted(a, b, c); !slices.Equal(got, want) {
		t.Fatalf("from env = %v, want %v", got, want)
	}
	env[seal.EnvRecipientsFile] = filepath.Join(dir, "missing")
	if _, err := seal.RecipientsFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil ||
		!strings.Contains(err.Error(), seal.EnvRecipientsFile) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing recipients file from env: err = %v", err)
	}
	if _, err := seal.LoadRecipients([]string{"age1nope"}, nil); err == nil || !strings.Contains(err.Error(), `"age1nope"`) {
		t.Fatalf("bad --encrypt-to: err = %v, want it named", err)
	}
	none, err := seal.RecipientsFromEnv(func(string) (string, bool) { return "", false })
	if err != nil || none.Len() != 0 {
		t.Fatalf("empty env: %v %v", none, err)
	}
	if err := seal.CheckRequired(none, true); !errors.Is(err, seal.ErrNoRecipients) || !strings.Contains(err.Error(), "--require-encryption") {
		t.Fatalf("CheckRequired(none, true) = %v", err)
	}
	if err := seal.CheckRequired(none, false); err != nil {
		t.Fatal(err)
	}
	if err := seal.CheckRequired(rs, true); err != nil {
		t.Fatal(err)
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	if seal.NewInfo(seal.Recipients{}) != nil {
		t.Fatal("NewInfo(empty) should be nil: not encrypted")
	}
	var nilInfo *seal.Info
	if nilInfo.Encrypted() || nilInfo.Validate() != nil {
		t.Fatal("nil Info: not encrypted and valid")
	}
	_, a := newKey(t)
	_, b := newKey(t)
	rs, err := seal.ParseRecipients([]string{b, a, b})
	if err != nil {
		t.Fatal(err)
	}
	info := seal.NewInfo(rs)
	j, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"format":"age","recipients":["` + sorted(a, b)[0] + `","` + sorted(a, b)[1] + `"]}`
	if string(j) != want {
		t.Fatalf("json = %s, want %s", j, want)
	}
	if !info.Encrypted() || info.Validate() != nil {
		t.Fatalf("info %+v: encrypted and valid expected, %v", info, info.Validate())
	}
	if err := (&seal.Info{Format: "gpg", Recipients: []string{a}}).Validate(); err == nil {
		t.Fatal("unknown format accepted")
	}
	if err := (&seal.Info{Format: "age"}).Validate(); err == nil {
		t.Fatal("no recipients accepted")
	}
	if k := seal.ObjectKey("c1/2026/snapshot.db.zst"); k != "c1/2026/snapshot.db.zst.age" || !seal.IsSealedKey(k) || seal.PlainKey(k) != "c1/2026/snapshot.db.zst" {
		t.Fatalf("ObjectKey = %q", k)
	}
	if seal.IsSealedKey("snapshot.db.zst") {
		t.Fatal("plain key seen as sealed")
	}
}
