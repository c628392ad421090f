package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// securityOf says how cfg secures the gRPC port, as NodeRecord.Security.
func securityOf(cfg Config) string {
	s := "plaintext"
	switch {
	case cfg.TLSCertFile != "" && cfg.TLSClientCAFile != "":
		s = "mtls"
	case cfg.TLSCertFile != "":
		s = "tls"
	}
	if cfg.Token != "" {
		s += "+token"
	}
	return s
}

// securityWait is how long a node whose gRPC port is secured unlike every
// live node's waits for one of its kind (or for them to go: a cluster
// switched to TLS at once, its nodes recreated together) before it gives
// up. A variable for tests.
var securityWait = 30 * time.Second

// awaitSameSecurity refuses to register rec while the cluster's live nodes
// all secure their gRPC ports otherwise (rec's settings are then the odd
// ones): such nodes cannot reach each other, so partitions the newcomer
// took could be reached by no one else, and it would serve them with its
// own, weaker settings (a trial started a plaintext node beside mTLS nodes
// with tokens: it took 28% of the partitions, which the others could not
// forward to, and answered increments without a token). Nodes of builds
// that do not record it are not counted. It waits securityWait for that to
// change, then fails with what to change.
func awaitSameSecurity(ctx context.Context, st storage.Store, rec runtime.NodeRecord, log *zap.Logger) error {
	deadline := time.Now().Add(securityWait)
	warned := false
	for {
		others, err := otherSecurity(ctx, st, rec)
		if err != nil || len(others) == 0 {
			// A read that fails is the registration's to report.
			return nil
		}
		var names []string
		for kind, ids := range others {
			names = append(names, fmt.Sprintf("%s (%s)", kind, strings.Join(ids, ", ")))
		}
		slices.Sort(names)
		msg := fmt.Sprintf("node %s secures its gRPC port as %s, but every live node of the cluster as %s: they could not reach each other", rec.NodeID, rec.Security, strings.Join(names, "; "))
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node: %s; start it with the same --tls-cert, --tls-key, --tls-client-ca and --token settings as they (docs/deploy.md, \"Security\")", msg)
		}
		if !warned {
			log.Warn(msg+"; waiting for them to go (a cluster switching its settings) before giving up", zap.Duration("for", securityWait))
			warned = true
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// otherSecurity returns the kinds of security of the live nodes other than
// rec's, by kind, if no live node shares rec's (else none).
func otherSecurity(ctx context.Context, st storage.Store, rec runtime.NodeRecord) (map[string][]string, error) {
	kvs, err := st.List(ctx, storage.NodesPrefix, storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	others := map[string][]string{}
	for _, kv := range kvs {
		var r runtime.NodeRecord
		if json.Unmarshal(kv.Value, &r) != nil || r.NodeID == rec.NodeID || r.Security == "" {
			continue
		}
		if r.Security == rec.Security {
			return nil, nil
		}
		others[r.Security] = append(others[r.Security], r.NodeID)
	}
	return others, nil
}
