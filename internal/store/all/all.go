// Package all links the production object-store backends into a program:
// a blank import of it registers each one with store.Register (today
// internal/store/cos, kinds "cos" and "s3"), so that store.Open can build them. It
// is the one place outside the backends that names them; the CLI
// (cmd/etcd-recovery) imports it, blank. A new backend is one more blank
// import here.
package all

import (
	_ "github.com/armada/etcd-recovery/internal/store/cos" // kinds (URL schemes) "cos" and "s3"
)
