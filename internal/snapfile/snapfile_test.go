package snapfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rivet-go/rivet/internal/snapfile"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A snapshot etcd made checks; the same file cut short, with a byte
// changed, empty, or made of something else does not, and says so.
func TestCheckTellsASnapshotFromWhatIsNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := etcdtest.StartClient(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	etcdtest.SaveSnapshot(t, ctx, cli, good)
	if err := snapfile.Check(good); err != nil {
		t.Fatalf("a snapshot of etcd: %v", err)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), b...)
	flipped[len(flipped)/2] ^= 1
	for name, content := range map[string][]byte{
		"cut":     b[:len(b)-1000],
		"flipped": flipped,
		"empty":   nil,
		"text":    []byte("not a snapshot\n"),
		"db only": b[:len(b)-32], // a member's database copied, no hash
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := snapfile.Check(path); !errors.Is(err, snapfile.ErrBad) {
			t.Errorf("%s: %v, want ErrBad", name, err)
		}
	}
}
