package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// weaker reports whether a node secured as mine lacks what one secured as
// theirs has (TLS, client certificates, a token): it could not reach such
// a node, or would serve what it took with less than the cluster asks (a
// TLS-only node beside mTLS nodes takes clients without a certificate and
// forwards their calls with its own). A node with more than the others is
// not: a cluster switched to more at once starts so.
func weaker(mine, theirs string) bool {
	rank := func(s string) int {
		switch {
		case strings.HasPrefix(s, "mtls"):
			return 2
		case strings.HasPrefix(s, "tls"):
			return 1
		}
		return 0
	}
	token := func(s string) bool { return strings.HasSuffix(s, "+token") }
	return rank(mine) < rank(theirs) || token(theirs) && !token(mine)
}

// securityWait is how long a node secured with less than every live node
// (see weaker) waits for one of its kind, or for them to go (a cluster
// switched back to fewer settings at once, its nodes recreated together),
// before it gives up. A variable for tests.
var securityWait = 30 * time.Second

// awaitSameSecurity refuses to register rec while every live node with a
// recorded security has what rec lacks (TLS, a token; weaker): they could
// not reach each other, and partitions the newcomer took could be reached
// by no one else and would be served with less than the cluster asks (a
// trial started a plaintext node beside mTLS nodes with tokens: it took
// 28% of the partitions, which the others could not forward to, and
// answered increments without a token). Only a weaker newcomer is
// refused, so a misconfigured node that registered first cannot keep the
// cluster's others out; nodes of builds that do not record it are not
// counted. It waits securityWait for that to change (retrying a failed
// read), then fails with what to change.
func awaitSameSecurity(ctx context.Context, st storage.Store, rec runtime.NodeRecord, log *zap.Logger) error {
	deadline := time.Now().Add(securityWait)
	warned := false
	for {
		others, err := strongerOnly(ctx, st, rec)
		if err == nil && len(others) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node: waiting to register: %w", ctx.Err())
		}
		msg := fmt.Sprintf("node %s could not read the cluster's registrations: %v", rec.NodeID, err)
		if err == nil {
			msg = fmt.Sprintf("node %s secures its gRPC port as %s, but every live node of the cluster with more: %s; they could not reach each other", rec.NodeID, rec.Security, strings.Join(securityNames(others), "; "))
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("node: %s; start it with the same --tls-cert, --tls-key, --tls-client-ca and --token settings as they (docs/deploy.md, \"Security\")", msg)
		}
		if !warned {
			log.Warn(msg+"; waiting for that to change (a cluster switching its settings) before giving up", zap.Duration("for", securityWait))
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

// strongerOnly returns the live nodes other than rec's, by kind of
// security, if each of them has what rec lacks (else none).
func strongerOnly(ctx context.Context, st storage.Store, rec runtime.NodeRecord) (map[string][]string, error) {
	kvs, err := st.List(ctx, storage.NodesPrefix, storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	records := make([][]byte, len(kvs))
	for i, kv := range kvs {
		records[i] = kv.Value
	}
	return allStronger(records, rec.Security, rec.NodeID), nil
}

// allStronger returns the nodes of records (NodeRecords as stored), but
// self's and those of builds that record no security, by kind of
// security, if each of them has what mine lacks (else none).
func allStronger(records [][]byte, mine, self string) map[string][]string {
	stronger := map[string][]string{}
	for _, v := range records {
		var r runtime.NodeRecord
		if json.Unmarshal(v, &r) != nil || r.NodeID == self || r.Security == "" {
			continue
		}
		if !weaker(mine, r.Security) {
			return nil
		}
		stronger[r.Security] = append(stronger[r.Security], r.NodeID)
	}
	return stronger
}

// securityNames names allStronger's nodes for a log, one "kind (IDs)" a
// kind, sorted so that a message reads the same each time.
func securityNames(byKind map[string][]string) []string {
	var names []string
	for kind, ids := range byKind {
		names = append(names, fmt.Sprintf("%s (%s)", kind, strings.Join(ids, ", ")))
	}
	slices.Sort(names)
	return names
}

// warnRestoredWithLess logs, at ERROR, a node restored from a backup whose
// nodes all secured their gRPC port with more than mine (see weaker): a
// restore revokes their registrations, so awaitSameSecurity, which
// compares with the live ones, no longer sees what the cluster asked. A
// compose restore run with -f, which replaces COMPOSE_FILE, drops the
// TLS overlay so, and the restored cluster serves its data to anyone. A
// log, not a refusal: restoring a backup into a differently secured
// cluster (a test copy) is the operator's to decide, and the records are
// gone once the first node revokes them, so that a refusal would hold
// only until the next start. It reads them before its own revocation;
// nodes restored together each log it if they read first.
func (n *Node) warnRestoredWithLess(ctx context.Context, mine string) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := n.etcd.Get(rctx, n.cfg.EtcdPrefix+storage.NodesPrefix, clientv3.WithPrefix())
	if err != nil {
		n.log.Warn("could not read the restored snapshot's node records to compare their security with this node's", zap.Error(err))
		return
	}
	records := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		records[i] = kv.Value
	}
	// No self to leave out: the backup's record of this node's ID is of
	// the cluster that was, and counts as theirs.
	theirs := allStronger(records, mine, "")
	if len(theirs) == 0 {
		return
	}
	names := securityNames(theirs)
	n.log.Error(fmt.Sprintf("restored from a backup of a cluster secured with more than this node: its nodes secured their gRPC port as %s, this one as %s; unless that is meant, stop every node and start them with the cluster's --tls-cert, --tls-key, --tls-client-ca and --token (with compose, every overlay the cluster runs with: docs/deploy.md, \"Backup and restore\")", strings.Join(names, "; "), mine),
		zap.Strings("backup_security", names), zap.String("security", mine))
}
