package testfix

import (
	"encoding/base64"
	"os"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// EscrowList is the escrow of EtcdCluster name in namespace as
// kube.CaptureEscrow captures it from what kubetest.AddEtcdCluster
// creates, without an API server: the EtcdCluster, its three TLS secrets
// from p (the server and peer certificate: p's server certificate, which
// the members serve; the client certificate p's; every CA p's) and its
// NodePort Service (nodePort 30458), with the versions annotation.
func EscrowList(tb testing.TB, p *testenv.PKI, namespace, name string) *catalog.EscrowList {
	tb.Helper()
	read := func(path string) []byte {
		tb.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	secret := func(sname string, data map[string][]byte) map[string]any {
		d := map[string]any{}
		for k, v := range data {
			d[k] = base64.StdEncoding.EncodeToString(v)
		}
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"metadata": map[string]any{"name": sname, "namespace": namespace}, "data": d}
	}
	ca, srv, srvKey := read(p.CAFile), read(p.ServerCertFile), read(p.ServerKeyFile)
	n := escrow.DefaultSecretNames(name)
	l := &catalog.EscrowList{APIVersion: "v1", Kind: "List", Metadata: map[string]any{}, Items: []map[string]any{
		{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
			"metadata": map[string]any{"name": name, "namespace": namespace},
			"spec": map[string]any{"size": 1, "version": "3.5.35", "TLS": map[string]any{"static": map[string]any{
				"operatorSecret": n.Client, "member": map[string]any{"peerSecret": n.Peer, "serverSecret": n.Server}}}}},
		secret(n.Client, map[string][]byte{escrow.ClientCertKey: read(p.ClientCertFile), escrow.ClientKeyKey: read(p.ClientKeyFile), escrow.ClientCAKey: ca}),
		secret(n.Peer, map[string][]byte{escrow.PeerCertKey: srv, escrow.PeerKeyKey: srvKey, escrow.PeerCAKey: ca}),
		secret(n.Server, map[string][]byte{escrow.ServerCertKey: srv, escrow.ServerKeyKey: srvKey, escrow.ServerCAKey: ca}),
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name + "-client-service-np", "namespace": namespace},
			"spec": map[string]any{"type": "NodePort", "ports": []any{map[string]any{"port": 2379, "nodePort": 30458}}}},
	}}
	if err := escrow.SetVersions(l, catalog.EscrowVersions{EtcdClusterAPI: "etcd.database.coreos.com/v1beta2"}); err != nil {
		tb.Fatal(err)
	}
	return l
}
