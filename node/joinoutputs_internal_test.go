package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// A join's values are committed apart from its record (storage format 3)
// only while every registered node reads format 3, and only once the
// cluster's record of format 3 is written: a node of format 2 (no
// ~outputs) would replay them as zero values, and one started after the
// record refuses to start instead.
func TestJoinOutputsGoApartOnlyOnceFormat3IsReadByAllAndRecorded(t *testing.T) {
	v3 := runtime.NodeRecord{NodeID: "a", StorageFormat: 3}
	v2 := runtime.NodeRecord{NodeID: "b", StorageFormat: 2}
	v1 := runtime.NodeRecord{NodeID: "c"}
	for _, c := range []struct {
		recs     map[string]runtime.NodeRecord
		recorded int
		want     int
	}{
		{map[string]runtime.NodeRecord{"a": v3}, 3, 3},
		// Every node reads 3, but only 2 is recorded (the record of 3
		// failed): the gate stays at 2.
		{map[string]runtime.NodeRecord{"a": v3}, 2, 2},
		{map[string]runtime.NodeRecord{"a": v3}, 0, 1},
		{map[string]runtime.NodeRecord{"a": v3, "b": v2}, 3, 2},
		{map[string]runtime.NodeRecord{"a": v3, "b": v2, "c": v1}, 3, 1},
		{map[string]runtime.NodeRecord{}, 3, 1},
	} {
		if got := writableFormat(clusterFormat(c.recs), c.recorded); got != c.want {
			t.Errorf("%v, recorded %d: writes format %d, want %d", c.recs, c.recorded, got, c.want)
		}
	}
	if got := olderNodes(map[string]runtime.NodeRecord{"a": v3, "b": v2, "c": v1}, 3); strings.Join(got, ",") != "b,c" {
		t.Errorf("nodes older than format 3: %v, want [b c]", got)
	}
}

// Once the cluster has recorded format 3, a build that reads up to format
// 2 (the one before joins' values went apart) refuses to start on it
// rather than replay those values as zeros; this build starts.
func TestABuildOfFormat2RefusesAClusterThatRecordedFormat3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := storage.NewMemory()
	defer st.Close()
	if _, _, err := st.PutIfAbsent(ctx, storage.FormatKey(2), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := checkStorageFormats(ctx, st, 2); err != nil {
		t.Fatalf("format 2 recorded, a build of format 2: %v", err)
	}
	if _, _, err := st.PutIfAbsent(ctx, storage.FormatKey(3), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	err := checkStorageFormats(ctx, st, 2)
	if err == nil || !strings.Contains(err.Error(), "storage format 3") {
		t.Fatalf("format 3 recorded, a build of format 2 starts: err = %v, want one naming storage format 3", err)
	}
	if err := checkStorageFormats(ctx, st, runtime.StorageFormat); err != nil {
		t.Fatalf("format 3 recorded, this build (format %d): %v", runtime.StorageFormat, err)
	}
}

// Format 3's gate waits formatSettle after the cluster's record (an
// older node that read the formats just before registers up to 30 s
// later), and olderNodeGrace after an older node was last seen registered
// (one whose lease lapsed registers again without reading them); neither
// when nothing says so.
func TestFormat3WaitsForOlderNodesThatMayStillRegister(t *testing.T) {
	now := time.Unix(1e9, 0)
	for _, c := range []struct {
		name             string
		recordedAt, seen time.Time
		want             time.Duration
	}{
		{"nothing known", time.Time{}, time.Time{}, 0},
		{"recorded long ago", now.Add(-time.Hour), time.Time{}, 0},
		{"recorded just now", now.Add(-time.Second), time.Time{}, formatSettle - time.Second},
		{"an older node just gone", now.Add(-time.Hour), now.Add(-10 * time.Second), olderNodeGrace - 10*time.Second},
		{"an older node gone long ago", now.Add(-time.Hour), now.Add(-time.Hour), 0},
		{"both", now, now, max(formatSettle, olderNodeGrace)},
	} {
		if got := formatWait(now, c.recordedAt, c.seen); got != c.want {
			t.Errorf("%s: wait %v, want %v", c.name, got, c.want)
		}
	}
}
