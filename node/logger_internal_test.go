package node

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
)

// The JSON log, which docker compose shows an operator, has readable
// times and no stack trace on an error that is no crash (a lease lost to
// a network cut read as one: a user trial).
func TestTheJSONLogHasReadableTimesAndNoStackTraces(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stderr := os.Stderr
	os.Stderr = w
	lg, _, err := newLogger("info", "json")
	os.Stderr = stderr
	if err != nil {
		t.Fatal(err)
	}
	lg.Error("lease lost", zap.String("node", "n1"))
	_ = lg.Sync()
	w.Close()
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var entry map[string]any
	if err := json.Unmarshal(line, &entry); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	ts, _ := entry["ts"].(string)
	if _, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts); err != nil {
		t.Errorf("ts %v: want an ISO 8601 time (%v)", entry["ts"], err)
	}
	if st, ok := entry["stacktrace"]; ok {
		t.Errorf("an error logged with a stack trace: %.200v", st)
	}
}
