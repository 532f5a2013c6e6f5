package escrow

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// The keys etcd-operator reads from a cluster's TLS secrets
// (spec.TLS.static): the operator (client) secret, the members' server
// secret and their peer secret.
const (
	ClientCertKey = "etcd-client.crt"
	ClientKeyKey  = "etcd-client.key"
	ClientCAKey   = "etcd-client-ca.crt"
	ServerCertKey = "server.crt"
	ServerKeyKey  = "server.key"
	ServerCAKey   = "server-ca.crt"
	PeerCertKey   = "peer.crt"
	PeerKeyKey    = "peer.key"
	PeerCAKey     = "peer-ca.crt"
)

// ServedKeyPrefix starts the Key of a certificate a member serves that is
// not the escrowed one ("served by <member endpoint>"), recorded by Check
// with Served true under the server secret.
const ServedKeyPrefix = "served by "

// SecretNames are the names of a cluster's three TLS secrets.
type SecretNames struct {
	Client, Peer, Server string
}

// DefaultSecretNames are the carrier's names of cluster's secrets:
// <name>-client-tls, <name>-peer-tls, <name>-server-tls.
func DefaultSecretNames(cluster string) SecretNames {
	return SecretNames{Client: cluster + "-client-tls", Peer: cluster + "-peer-tls", Server: cluster + "-server-tls"}
}

// SecretNamesOf reads the secrets' names from an EtcdCluster object
// (spec.TLS.static.operatorSecret, .member.peerSecret,
// .member.serverSecret), each falling back to DefaultSecretNames.
func SecretNamesOf(etcdCluster map[string]any) SecretNames {
	md, _ := etcdCluster["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	n := DefaultSecretNames(name)
	static := nested(etcdCluster, "spec", "TLS", "static")
	member, _ := static["member"].(map[string]any)
	if s, _ := static["operatorSecret"].(string); s != "" {
		n.Client = s
	}
	if s, _ := member["peerSecret"].(string); s != "" {
		n.Peer = s
	}
	if s, _ := member["serverSecret"].(string); s != "" {
		n.Server = s
	}
	return n
}

func nested(o map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, _ := o[p].(map[string]any)
		if next == nil {
			return nil
		}
		o = next
	}
	return o
}

// EtcdCluster is the list's EtcdCluster item (nil when there is none).
func EtcdCluster(list *catalog.EscrowList) map[string]any {
	for _, it := range list.Items {
		if k, _ := it["kind"].(string); k == "EtcdCluster" {
			return it
		}
	}
	return nil
}

// Item is the list's item of kind and name (nil when there is none).
func Item(list *catalog.EscrowList, kind, name string) map[string]any {
	for _, it := range list.Items {
		md, _ := it["metadata"].(map[string]any)
		n, _ := md["name"].(string)
		if k, _ := it["kind"].(string); k == kind && n == name {
			return it
		}
	}
	return nil
}

// SecretData is the decoded data of the list's Secret name (its data
// values are base64, as the API serves them); false when it is not in
// the list or a value is not base64.
func SecretData(list *catalog.EscrowList, name string) (map[string][]byte, bool) {
	it := Item(list, "Secret", name)
	if it == nil {
		return nil, false
	}
	out := map[string][]byte{}
	data, _ := it["data"].(map[string]any)
	for k, v := range data {
		s, _ := v.(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, false
		}
		out[k] = b
	}
	return out, true
}

// Versions reads the versions annotation of the list's EtcdCluster.
func Versions(list *catalog.EscrowList) (catalog.EscrowVersions, error) {
	var v catalog.EscrowVersions
	ec := EtcdCluster(list)
	ann := nested(ec, "metadata", "annotations")
	s, _ := ann[catalog.AnnotationEscrowVersions].(string)
	if s == "" {
		return v, fmt.Errorf("escrow: the EtcdCluster has no annotation %s", catalog.AnnotationEscrowVersions)
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return v, fmt.Errorf("escrow: annotation %s: %w", catalog.AnnotationEscrowVersions, err)
	}
	return v, nil
}

// SetVersions writes v as the versions annotation of the list's
// EtcdCluster.
func SetVersions(list *catalog.EscrowList, v catalog.EscrowVersions) error {
	ec := EtcdCluster(list)
	if ec == nil {
		return fmt.Errorf("escrow: no EtcdCluster in the list")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	md, _ := ec["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		ec["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[catalog.AnnotationEscrowVersions] = string(b)
	return nil
}

// Certs are the certificates of every Secret of the list: each PEM
// certificate of each key, in list order and key order.
func Certs(list *catalog.EscrowList) []catalog.EscrowCert {
	var out []catalog.EscrowCert
	for _, it := range list.Items {
		if k, _ := it["kind"].(string); k != "Secret" {
			continue
		}
		md, _ := it["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		data, _ := SecretData(list, name)
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, c := range parseCerts(data[k]) {
				out = append(out, certOf(name, k, c))
			}
		}
	}
	return out
}

func certOf(secret, key string, c *x509.Certificate) catalog.EscrowCert {
	return catalog.EscrowCert{Secret: secret, Key: key, Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		NotAfter: c.NotAfter.UTC(), SHA256: Fingerprint(c)}
}

// Fingerprint is the sha256 of a certificate's DER, in hex.
func Fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// parseCerts is every CERTIFICATE block of b that parses.
func parseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// Check checks an escrow against what the members serve, in x509 terms
// only: the server certificate every member serves (served: by member
// endpoint, the chain its TLS handshake presented, leaf first) must be
// the escrowed server secret's server.crt, and the escrowed client
// certificate must chain to the escrowed client CA (and to the server
// secret's server-ca.crt, the CA the members trust for clients, when the
// secret has one). It returns every escrowed certificate with its expiry
// (the server certificate Served when every member serves it) and the
// problems found, each naming the secret (and the member) concerned. An
// expired certificate is not a problem here: its NotAfter is recorded,
// and the alerts judge it. With no member's chain in served, the server
// certificate is not compared, and that is a problem: an escrow is
// present only if at least one member was compared and every compared
// member serves the escrowed certificate.
func Check(list *catalog.EscrowList, served map[string][]*x509.Certificate, now time.Time) ([]catalog.EscrowCert, []string) {
	certs := Certs(list)
	var problems []string
	ec := EtcdCluster(list)
	if ec == nil {
		return certs, []string{"the escrow holds no EtcdCluster"}
	}
	names := SecretNamesOf(ec)

	server, serverCert, p := secretCert(list, names.Server, ServerCertKey)
	problems = append(problems, p...)
	if serverCert != nil {
		eps := make([]string, 0, len(served))
		for ep := range served {
			eps = append(eps, ep)
		}
		slices.Sort(eps)
		if len(eps) == 0 {
			// Present means compared: with no handshake (no client TLS,
			// every member's failed) nothing says the members serve it.
			problems = append(problems, fmt.Sprintf("server certificate not compared: no member's served certificate was read, so nothing shows the members serve the escrowed one of secret %s", names.Server))
		}
		matched := 0
		for _, ep := range eps {
			chain := served[ep]
			switch {
			case len(chain) == 0:
				problems = append(problems, fmt.Sprintf("member %s presented no certificate", ep))
			case !chain[0].Equal(serverCert):
				problems = append(problems, fmt.Sprintf("member %s serves certificate sha256 %s (%s, not after %s), not the escrowed server certificate of secret %s (%s, sha256 %s): the secret was rotated and the members not restarted, or the secret is not the one they serve",
					ep, Fingerprint(chain[0]), chain[0].Subject, chain[0].NotAfter.UTC().Format(time.RFC3339), names.Server, ServerCertKey, Fingerprint(serverCert)))
				// What the member serves expires too: recorded under the
				// server secret, so the expiry alert (earliest NotAfter per
				// secret) watches it and not only the escrowed one.
				sc := certOf(names.Server, ServedKeyPrefix+ep, chain[0])
				sc.Served = true
				certs = append(certs, sc)
			default:
				matched++
			}
		}
		if len(eps) > 0 && matched == len(eps) {
			fp := Fingerprint(serverCert)
			for i := range certs {
				if certs[i].Secret == names.Server && certs[i].Key == ServerCertKey && certs[i].SHA256 == fp {
					certs[i].Served = true
				}
			}
		}
	}

	client, clientCert, p := secretCert(list, names.Client, ClientCertKey)
	problems = append(problems, p...)
	if clientCert != nil {
		problems = append(problems, chains(clientCert, names.Client, ClientCertKey, client[ClientCAKey], names.Client, ClientCAKey, now)...)
		if ca := server[ServerCAKey]; len(ca) > 0 {
			problems = append(problems, chains(clientCert, names.Client, ClientCertKey, ca, names.Server, ServerCAKey, now)...)
		}
	}
	if _, ok := SecretData(list, names.Peer); !ok {
		problems = append(problems, fmt.Sprintf("secret %s (peer TLS) is not in the escrow", names.Peer))
	}
	return certs, problems
}

// secretCert is the secret's data and the first certificate of its key.
func secretCert(list *catalog.EscrowList, secret, key string) (map[string][]byte, *x509.Certificate, []string) {
	data, ok := SecretData(list, secret)
	if !ok {
		return nil, nil, []string{fmt.Sprintf("secret %s is not in the escrow", secret)}
	}
	cs := parseCerts(data[key])
	if len(cs) == 0 {
		return data, nil, []string{fmt.Sprintf("secret %s has no certificate in key %s", secret, key)}
	}
	return data, cs[0], nil
}

// chains checks that leaf (secret/key) chains to the CA certificates in
// caPEM (caSecret/caKey), for client authentication, at now, or, when the
// leaf has expired, at its last valid second (expiry is recorded, not
// judged here).
func chains(leaf *x509.Certificate, secret, key string, caPEM []byte, caSecret, caKey string, now time.Time) []string {
	cas := parseCerts(caPEM)
	if len(cas) == 0 {
		return []string{fmt.Sprintf("secret %s has no CA certificate in key %s", caSecret, caKey)}
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	at := now
	if at.After(leaf.NotAfter) {
		at = leaf.NotAfter.Add(-time.Second)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return []string{fmt.Sprintf("the client certificate of secret %s (%s, %s) does not chain to the CA in secret %s (%s): %v",
			secret, key, leaf.Subject, caSecret, caKey, err)}
	}
	return nil
}

// Served reads the certificate chain each member serves, by one TLS
// handshake per endpoint (an https URL or host:port) with cfg (the etcd
// client TLS: the chain must verify), each bounded by ctx. Nothing is
// sent after the handshake. It returns the chains by endpoint and, for
// each member that could not be read, a problem naming it.
func Served(ctx context.Context, endpoints []string, cfg *tls.Config) (map[string][]*x509.Certificate, []string) {
	out := map[string][]*x509.Certificate{}
	var problems []string
	for _, ep := range endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		if _, _, err := net.SplitHostPort(host); err != nil {
			problems = append(problems, fmt.Sprintf("member %s: not an endpoint with a port: %v", ep, err))
			continue
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg != nil {
			c = cfg.Clone()
		}
		if c.ServerName == "" {
			h, _, _ := net.SplitHostPort(host)
			c.ServerName = strings.Trim(h, "[]")
		}
		d := tls.Dialer{Config: c, NetDialer: &net.Dialer{}}
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			problems = append(problems, fmt.Sprintf("member %s: TLS handshake to read its server certificate: %v", ep, err))
			continue
		}
		out[ep] = conn.(*tls.Conn).ConnectionState().PeerCertificates
		conn.Close()
	}
	return out, problems
}
