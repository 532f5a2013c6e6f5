package catalog

// The v2 export: the document a backup stores as its v2 object (its JSON
// format is the wire format, V2ExportFormat) and ExportV2, which reads it
// from a member. backup writes it, restore v2 reads it back.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// V2ExportFormat identifies the v2 export document.
const V2ExportFormat = "etcd-recovery/v2-export/1"

// V2Export is the v2 keyspace, flattened: every directory and key, sorted
// by key, parents before children.
type V2Export struct {
	Format    string   `json:"format"`
	EtcdIndex uint64   `json:"etcdIndex"`
	Nodes     []V2Node `json:"nodes"`
}

// V2Node is one v2 directory or key.
type V2Node struct {
	Key           string     `json:"key"`
	Dir           bool       `json:"dir,omitempty"`
	Value         string     `json:"value,omitempty"`
	TTL           int64      `json:"ttl,omitempty"` // seconds left when exported
	Expiration    *time.Time `json:"expiration,omitempty"`
	CreatedIndex  uint64     `json:"createdIndex"`
	ModifiedIndex uint64     `json:"modifiedIndex"`
}

// Counts returns the number of keys and directories.
func (e *V2Export) Counts() (keys, dirs int) {
	for _, n := range e.Nodes {
		if n.Dir {
			dirs++
		} else {
			keys++
		}
	}
	return keys, dirs
}

// ErrV2Unavailable means the member does not serve the v2 API (etcd 3.6, or
// 3.4/3.5 without --enable-v2).
var ErrV2Unavailable = errors.New("the v2 API is not served (etcd 3.6, or started without --enable-v2)")

type v2wire struct {
	Key           string     `json:"key"`
	Dir           bool       `json:"dir"`
	Value         *string    `json:"value"`
	Nodes         []*v2wire  `json:"nodes"`
	TTL           int64      `json:"ttl"`
	Expiration    *time.Time `json:"expiration"`
	CreatedIndex  uint64     `json:"createdIndex"`
	ModifiedIndex uint64     `json:"modifiedIndex"`
}

// ExportV2 reads the whole v2 keyspace from one member, recursively, without
// needing quorum (quorum=false), so it works against a lone survivor.
func ExportV2(ctx context.Context, hc *http.Client, clientURL string) (*V2Export, error) {
	u := strings.TrimRight(clientURL, "/") + "/v2/keys/?recursive=true&sorted=true&quorum=false"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		// An enabled v2 store always has "/"; a 404 on it means no v2 API.
		return nil, ErrV2Unavailable
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("v2 GET /v2/keys/: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var body struct {
		Node *v2wire `json:"node"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("v2 GET /v2/keys/: decode: %w", err)
	}
	exp := &V2Export{Format: V2ExportFormat}
	exp.EtcdIndex, _ = strconv.ParseUint(resp.Header.Get("X-Etcd-Index"), 10, 64)
	if body.Node != nil {
		flattenV2(body.Node, &exp.Nodes)
	}
	sort.SliceStable(exp.Nodes, func(i, j int) bool { return exp.Nodes[i].Key < exp.Nodes[j].Key })
	return exp, nil
}

func flattenV2(n *v2wire, out *[]V2Node) {
	if n.Key != "" && n.Key != "/" { // the root itself is implicit
		node := V2Node{Key: n.Key, Dir: n.Dir, TTL: n.TTL, Expiration: n.Expiration,
			CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex}
		if n.Value != nil {
			node.Value = *n.Value
		}
		*out = append(*out, node)
	}
	for _, c := range n.Nodes {
		flattenV2(c, out)
	}
}
