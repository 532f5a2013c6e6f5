package undelete

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// decodeMeta reads the metadata of an object as kube-apiserver stores it:
// protobuf (built-in types, with the "k8s\x00" envelope) and JSON (custom
// resources); an encrypted value and plain bytes are not decoded.
func TestDecodeMeta(t *testing.T) {
	del := metav1.NewTime(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	meta := metav1.ObjectMeta{Name: "ns1", UID: types.UID("uid-ns1"), DeletionTimestamp: &del,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "uid-owner"}}}
	var pb bytes.Buffer
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: meta}
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(ns, &pb); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pb.Bytes(), protoMagic) {
		t.Fatalf("the protobuf serializer's bytes do not start with the envelope: %q", pb.Bytes()[:8])
	}
	js, err := json.Marshal(map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{"protobuf": pb.Bytes(), "json": js} {
		m := decodeMeta(v)
		if !m.Decoded || m.UID != "uid-ns1" || len(m.Owners) != 1 || m.Owners[0] != "uid-owner" || m.Deleting != "2026-11-29T03:00:00Z" {
			t.Errorf("%s: %+v", name, m)
		}
	}
	ns.DeletionTimestamp = nil
	pb.Reset()
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(ns, &pb); err != nil {
		t.Fatal(err)
	}
	if m := decodeMeta(pb.Bytes()); !m.Decoded || m.Deleting != "" {
		t.Errorf("not being deleted: %+v", m)
	}
	for name, v := range map[string][]byte{"encrypted": []byte("k8s:enc:aescbc:v1:key1:\x01\x02"), "plain": []byte("value"),
		"damaged protobuf": append([]byte("k8s\x00"), 0xff, 0xff), "damaged json": []byte("{\"metadata\":")} {
		if m := decodeMeta(v); m.Decoded || m.Deleting != "" || m.Encrypted != (name == "encrypted") {
			t.Errorf("%s: %+v", name, m)
		}
	}
}

// The namespace matcher: exactly the namespace's object and its
// namespaced objects (built-in, services' two folders, custom resources),
// never another namespace's, a cluster-scoped object, or a namespace whose
// name only starts with it.
func TestMatcher(t *testing.T) {
	m := newMatcher(Options{Namespaces: []string{"ns1"}, KubePrefix: "/registry", Prefixes: []string{"/raw/"}})
	for key, want := range map[string]bool{
		"/registry/namespaces/ns1":                                     true,
		"/registry/namespaces/ns10":                                    false,
		"/registry/configmaps/ns1/a":                                   true,
		"/registry/configmaps/ns10/a":                                  false,
		"/registry/services/specs/ns1/svc":                             true,
		"/registry/services/endpoints/ns1/svc":                         true,
		"/registry/example.com/widgets/ns1/w":                          true,
		"/registry/example.com/widgets/ns1":                            false, // a cluster-scoped widget named ns1
		"/registry/apiextensions.k8s.io/customresourcedefinitions/ns1": false,
		"/registry/ns1/x":                                              false,
		"/registry/clusterroles/ns1":                                   false,
		"/other/configmaps/ns1/a":                                      false,
		"/raw/anything":                                                true,
	} {
		if got := m.match([]byte(key)); got != want {
			t.Errorf("match(%q) = %v, want %v", key, got, want)
		}
	}
}
