package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Escrow: what a restore needs besides the data (docs/object-layout.md#escrow).
//
// A cluster is more than its data: the EtcdCluster, its three TLS secrets
// (etcd-<id>-client-tls, -peer-tls, -server-tls) and its Services (the
// client, server and nodeport Services, with their nodePorts and cluster
// IPs). The escrow is those objects, as a Kubernetes List (apiVersion v1,
// kind List) that `kubectl create -f` accepts as it is, sealed with age
// and stored content-addressed:
//
//	<prefix>/_escrow/<cluster-id>/<address>.json.age
//
// <address> is EscrowAddress: the sha256 of the recipients and the
// plaintext, so an unchanged cluster sealed to the same recipients is
// stored once, however many backups name it, and a new recipient or a
// rotated certificate makes a new object. Each backup's manifest names
// its escrow (Manifest.Escrow); an escrow is deleted with the last backup
// that names it. It is never stored in plaintext: without a recipient
// there is no escrow (EscrowNone).
//
// The plaintext never holds status, uid, resourceVersion, managedFields,
// creationTimestamp or ownerReferences (an owner reference to a deleted
// EtcdCluster would have the garbage collector delete the rebuilt
// object); the versions that matter ride on the EtcdCluster item as the
// annotation AnnotationEscrowVersions (EscrowVersions, JSON).

// EscrowState is what a backup's escrow is (Manifest.Escrow.State).
type EscrowState string

const (
	// EscrowPresent: stored, and every check at backup time passed.
	EscrowPresent EscrowState = "present"
	// EscrowMismatch: stored, but a check failed (the server certificate
	// the members serve is not the escrowed one, the client certificate
	// does not chain to the escrowed CA): named in Problems.
	EscrowMismatch EscrowState = "mismatch"
	// EscrowMissing: not stored, because what it needs could not be read
	// (a secret, a Service or the EtcdCluster missing, the API not
	// reachable) or could not be written: named in Problems.
	EscrowMissing EscrowState = "missing"
	// EscrowNone: not stored, because there is no recipient to seal it to
	// (the backup is not encrypted and no --escrow-recipient is given).
	EscrowNone EscrowState = "none"
)

// EscrowStates are the states, in the order tables list them.
var EscrowStates = []EscrowState{EscrowPresent, EscrowMismatch, EscrowMissing, EscrowNone}

// EscrowRef is a backup's escrow, in its manifest: where it is, what it
// holds and what the checks at backup time found. It holds no secret:
// the certificates' public facts only.
type EscrowRef struct {
	State EscrowState `json:"state"`
	// Address names the stored object (Layout.EscrowKey); empty when
	// nothing is stored (missing, none).
	Address string `json:"address,omitempty"`
	// The stored (sealed) and raw (plaintext List) sizes and sha256s, as
	// objectio writes and checks them.
	StoredSize   int64  `json:"storedSize,omitempty"`
	StoredSHA256 string `json:"storedSHA256,omitempty"`
	RawSize      int64  `json:"rawSize,omitempty"`
	RawSHA256    string `json:"rawSHA256,omitempty"`
	// Recipients are the age public keys it is sealed to, sorted;
	// BreakGlass says they are --escrow-recipient's rather than the
	// backup's.
	Recipients []string `json:"recipients,omitempty"`
	BreakGlass bool     `json:"breakGlass,omitempty"`
	// Objects are the objects it holds, "Kind/name", in List order.
	Objects []string `json:"objects,omitempty"`
	// Certs are the escrowed certificates, each with its expiry.
	Certs []EscrowCert `json:"certs,omitempty"`
	// Problems name what is missing or does not match (state missing or
	// mismatch), and why there is none (state none).
	Problems []string `json:"problems,omitempty"`
}

// EscrowCert is one certificate of an escrowed secret: its public facts.
type EscrowCert struct {
	Secret   string    `json:"secret"` // the secret's name
	Key      string    `json:"key"`    // the secret's key holding it
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer,omitempty"`
	NotAfter time.Time `json:"notAfter"`
	// SHA256 is the fingerprint of the certificate (DER).
	SHA256 string `json:"sha256"`
	// Served: the members serve this certificate (the server
	// certificate, compared with a TLS handshake).
	Served bool `json:"served,omitempty"`
}

// Usable says whether a restore can rebuild the cluster from this escrow
// as it was: stored, and nothing found wrong with it at backup time.
func (r *EscrowRef) Usable() bool { return r != nil && r.State == EscrowPresent }

// Stored says whether an escrow object is named (present or mismatch).
func (r *EscrowRef) Stored() bool {
	return r != nil && r.Address != "" && (r.State == EscrowPresent || r.State == EscrowMismatch)
}

// NearestExpiry is the earliest NotAfter of the escrowed certificates
// (zero when there are none).
func (r *EscrowRef) NearestExpiry() time.Time {
	var t time.Time
	if r == nil {
		return t
	}
	for _, c := range r.Certs {
		if t.IsZero() || c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

// StateOf is a manifest's escrow state for tables and metrics: its
// Escrow's, or "" for a backup written before escrow existed.
func StateOf(m *Manifest) EscrowState {
	if m == nil || m.Escrow == nil {
		return ""
	}
	return m.Escrow.State
}

var escrowAddressRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks an escrow reference read from a manifest.
func (r *EscrowRef) Validate() error {
	if r == nil {
		return nil
	}
	if !slices.Contains(EscrowStates, r.State) {
		return fmt.Errorf("escrow: unknown state %q", r.State)
	}
	stored := r.State == EscrowPresent || r.State == EscrowMismatch
	switch {
	case stored && !escrowAddressRe.MatchString(r.Address):
		return fmt.Errorf("escrow: state %s with an invalid address %q", r.State, r.Address)
	case stored && (r.StoredSHA256 == "" || r.RawSHA256 == "" || len(r.Recipients) == 0):
		return fmt.Errorf("escrow: state %s without its sizes, sha256s or recipients", r.State)
	case !stored && r.Address != "":
		return fmt.Errorf("escrow: state %s names an object (%s)", r.State, r.Address)
	}
	return nil
}

// escrowDir is the tool's folder of the escrows, under the root prefix.
const escrowDir = "_escrow/"

// EscrowSuffix ends every escrow object's name: JSON sealed with age.
const EscrowSuffix = ".json.age"

// EscrowPrefix is the key prefix of a cluster's escrows, ending in '/';
// of every cluster when clusterID is empty.
func (l Layout) EscrowPrefix(clusterID string) string {
	return l.underRoot(escrowDir, clusterID)
}

// EscrowKey is the key of a cluster's escrow at address:
// <prefix>/_escrow/<cluster>/<address>.json.age.
func (l Layout) EscrowKey(clusterID, address string) string {
	return l.EscrowPrefix(clusterID) + address + EscrowSuffix
}

// classifyEscrow is Classify of rest, a key under the escrow folder
// without it: <cluster>/<address>.json.age, else unknown.
func classifyEscrow(rest string) KeyInfo {
	id, obj, ok := strings.Cut(rest, "/")
	addr, isEscrow := strings.CutSuffix(obj, EscrowSuffix)
	if !ok || !isEscrow || !escrowAddressRe.MatchString(addr) || ValidateClusterID(id) != nil {
		return KeyInfo{Kind: KeyUnknown}
	}
	return KeyInfo{Kind: KeyEscrow, ClusterID: id, Name: addr}
}

// EscrowAddress is the content address of an escrow: the sha256 of a
// domain tag, the sorted recipients and the plaintext, in hex. The same
// objects sealed to other recipients get another address, so a backup
// never names an escrow that its recipients cannot open.
func EscrowAddress(recipients []string, plaintext []byte) string {
	rs := slices.Clone(recipients)
	slices.Sort(rs)
	h := sha256.New()
	h.Write([]byte("etcd-recovery escrow v1\n"))
	for _, r := range rs {
		h.Write([]byte(r))
		h.Write([]byte{'\n'})
	}
	h.Write([]byte{'\n'})
	h.Write(plaintext)
	return hex.EncodeToString(h.Sum(nil))
}

// AnnotationEscrowVersions is the annotation on the escrowed EtcdCluster
// that holds EscrowVersions as JSON.
const AnnotationEscrowVersions = "etcd-recovery.armada.ibm.com/escrow-versions"

// EscrowVersions are the versions that matter for a rebuild.
type EscrowVersions struct {
	// Etcd is the etcd version each member served, by member name.
	Etcd map[string]string `json:"etcd,omitempty"`
	// Storage is the snapshot's storage version (etcd's cluster version).
	Storage string `json:"storage,omitempty"`
	// EtcdClusterAPI is the EtcdCluster's apiVersion.
	EtcdClusterAPI string `json:"etcdClusterAPI"`
}

// EscrowList is an escrow's plaintext: a Kubernetes List of the
// cluster's objects, each a JSON object as the API serves it, stripped
// (see the package comment above).
type EscrowList struct {
	APIVersion string           `json:"apiVersion"` // "v1"
	Kind       string           `json:"kind"`       // "List"
	Metadata   map[string]any   `json:"metadata"`
	Items      []map[string]any `json:"items"`
}

// MaxEscrowBytes bounds an escrow's plaintext: three secrets and a few
// Services are tens of KiB; more is not one of the tool's.
const MaxEscrowBytes = 4 << 20

// MarshalEscrow encodes a List canonically (sorted keys, no indentation,
// a final newline), so that the same objects always have the same bytes
// and the same address.
func MarshalEscrow(l *EscrowList) ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(l) // encoding/json sorts map keys
	if err != nil {
		return nil, fmt.Errorf("escrow: %w", err)
	}
	return append(b, '\n'), nil
}

// UnmarshalEscrow decodes and checks an escrow's plaintext.
func UnmarshalEscrow(b []byte) (*EscrowList, error) {
	if len(b) > MaxEscrowBytes {
		return nil, fmt.Errorf("escrow: %d bytes, more than the bound %d", len(b), MaxEscrowBytes)
	}
	var l EscrowList
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("escrow: not a List: %w", err)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

// Validate checks the shape: a v1 List whose items each have an
// apiVersion, a kind and a name, with no server-set field (uid,
// resourceVersion, ownerReferences, managedFields, status), and exactly
// one EtcdCluster.
func (l *EscrowList) Validate() error {
	if l.APIVersion != "v1" || l.Kind != "List" {
		return fmt.Errorf("escrow: want apiVersion v1, kind List; got %q, %q", l.APIVersion, l.Kind)
	}
	clusters := 0
	for i, it := range l.Items {
		api, _ := it["apiVersion"].(string)
		kind, _ := it["kind"].(string)
		md, _ := it["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		if api == "" || kind == "" || name == "" {
			return fmt.Errorf("escrow: item %d has no apiVersion, kind or metadata.name", i)
		}
		for _, f := range []string{"uid", "resourceVersion", "ownerReferences", "managedFields", "creationTimestamp"} {
			if _, ok := md[f]; ok {
				return fmt.Errorf("escrow: %s/%s holds metadata.%s", kind, name, f)
			}
		}
		if _, ok := it["status"]; ok {
			return fmt.Errorf("escrow: %s/%s holds a status", kind, name)
		}
		if kind == "EtcdCluster" {
			clusters++
		}
	}
	if clusters != 1 {
		return errors.New("escrow: want exactly one EtcdCluster")
	}
	return nil
}

// ObjectNames are the items as "Kind/name", in order (EscrowRef.Objects).
func (l *EscrowList) ObjectNames() []string {
	out := make([]string, 0, len(l.Items))
	for _, it := range l.Items {
		md, _ := it["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		kind, _ := it["kind"].(string)
		out = append(out, kind+"/"+name)
	}
	return out
}
