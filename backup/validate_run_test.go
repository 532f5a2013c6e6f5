package backup_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
)

// Run refuses a prefix the store could not list back before it contacts
// anything, for library callers as for the CLI.
func TestRunRefusesBadPrefix(t *testing.T) {
	for _, p := range []string{"a//b", ".", "a/../b", "a b"} {
		_, err := backup.Run(context.Background(), backup.Options{ClusterID: "c1", Layout: catalog.Layout{Prefix: p}})
		var be *backup.Error
		if !errors.As(err, &be) || be.Step() != backup.StepValidate || !strings.Contains(err.Error(), "invalid prefix") {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
}
