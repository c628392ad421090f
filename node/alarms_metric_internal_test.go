package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// An etcd alarm shows on the node's /metrics without a write: an idle
// cluster out of space moved no rivet series (rivet_calls_total counts
// refused calls only), and a node on an external etcd serves no etcd_*
// series at all.
func TestEtcdsNoSpaceAlarmShowsOnAnIdleNodesMetrics(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 8
	cfg.Logger = zap.NewNop()
	n := StartForTest(t, ctx, cfg, reg)
	url := "http://" + n.HTTPAddr() + "/metrics"
	const none, one = `rivet_etcd_alarms{alarm="NOSPACE"} 0`, `rivet_etcd_alarms{alarm="NOSPACE"} 1`
	if code, body, err := awaitProbe(t, url, http.StatusOK, none, 20*time.Second); err != nil || !strings.Contains(body, none) || !strings.Contains(body, `rivet_etcd_alarms{alarm="CORRUPT"} 0`) {
		t.Fatalf("/metrics before any alarm: %d, %v; want %s (and CORRUPT 0)", code, err, none)
	}

	// The alarm etcd raises when it is out of space, raised by hand: the
	// node writes nothing meanwhile.
	op := etcdtest.NewClient(t, n.embedded.Endpoints())
	ms, err := op.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alarm := &pb.AlarmMember{MemberID: ms.Members[0].ID, Alarm: pb.AlarmType_NOSPACE}
	if _, err := pb.NewMaintenanceClient(op.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: alarm.MemberID, Alarm: alarm.Alarm}); err != nil {
		t.Fatal(err)
	}
	if code, body, err := awaitProbe(t, url, http.StatusOK, one, 20*time.Second); err != nil || !strings.Contains(body, one) {
		t.Errorf("/metrics with etcd's NOSPACE alarm active: %d, %v; want %s within 20 s", code, err, one)
	}
	if _, err := op.AlarmDisarm(ctx, (*clientv3.AlarmMember)(alarm)); err != nil {
		t.Fatal(err)
	}
	if code, body, err := awaitProbe(t, url, http.StatusOK, none, 20*time.Second); err != nil || !strings.Contains(body, none) {
		t.Errorf("/metrics once the alarm is disarmed: %d, %v; want %s within 20 s", code, err, none)
	}
}
