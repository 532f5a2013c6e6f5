package prune

import (
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/seal"
)

func TestRecipientsCell(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := seal.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := RecipientsCell(rs.Strings()); !strings.HasPrefix(got, "age1") || len([]rune(got)) != RecipientShortLen+1 {
		t.Errorf("RecipientsCell %q", got)
	}
	if RecipientsCell(nil) != "-" {
		t.Error("RecipientsCell of a plaintext backup")
	}
}
