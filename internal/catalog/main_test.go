package catalog_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// TestMain stops the shared test servers after the package's tests.
func TestMain(m *testing.M) { testenv.Main(m) }
