package undelete

import (
	"bytes"
	"encoding/json"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// What kube-apiserver stores (k8s.io/apiserver's storage/value and
// runtime/serializer/protobuf): a built-in object as "k8s\x00" and a
// runtime.Unknown whose Raw is the object's protobuf, field 1 of which is
// its ObjectMeta; a custom resource (and any object with
// --storage-media-type=application/json) as JSON; and with encryption at
// rest, "k8s:enc:<provider>:..." that only the API server can read.
var (
	protoMagic   = []byte("k8s\x00")
	encryptedTag = []byte("k8s:enc:")
)

// objectMeta is what undelete reads of a Kubernetes object's stored
// bytes: never changed, only read to order the writes and to refuse an
// object that was already being deleted at the point.
type objectMeta struct {
	// Decoded is false for a value that is not a Kubernetes object
	// undelete can read (plain keys, or Encrypted).
	Decoded   bool
	Encrypted bool
	UID       string
	// Owners are the uids of its ownerReferences.
	Owners []string
	// Deleting is the object's metadata.deletionTimestamp, "" when unset.
	Deleting string
}

// decodeMeta reads v's ObjectMeta (objectMeta.Decoded false when it is not
// one it can read).
func decodeMeta(v []byte) objectMeta {
	var m metav1.ObjectMeta
	switch {
	case bytes.HasPrefix(v, encryptedTag):
		return objectMeta{Encrypted: true}
	case bytes.HasPrefix(v, protoMagic):
		var u runtime.Unknown
		if err := u.Unmarshal(v[len(protoMagic):]); err != nil {
			return objectMeta{}
		}
		raw, ok, err := etcdinternals.BytesField(u.Raw, 1)
		if err != nil || !ok || m.Unmarshal(raw) != nil {
			return objectMeta{}
		}
	case len(v) > 0 && v[0] == '{':
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(v, &obj); err != nil {
			return objectMeta{}
		}
		m = obj.Metadata
	default:
		return objectMeta{}
	}
	out := objectMeta{Decoded: true, UID: string(m.UID)}
	for _, o := range m.OwnerReferences {
		out.Owners = append(out.Owners, string(o.UID))
	}
	if m.DeletionTimestamp != nil {
		out.Deleting = m.DeletionTimestamp.UTC().Format("2006-01-02T15:04:05Z")
	}
	return out
}
