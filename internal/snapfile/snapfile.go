// Package snapfile checks a snapshot file of etcd (etcdctl snapshot save,
// rivetctl backup) before anything trusts it: etcd appends to the database
// the SHA-256 of what precedes it, so a file cut short, one corrupted, or
// one that is not a snapshot at all is told apart from a good one without
// etcd, and said so in plain words (etcd's restore says it in its own:
// a flag of etcdutl's, "invalid argument", two hashes as byte arrays).
package snapfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrBad is the error of a file that is no complete snapshot.
var ErrBad = errors.New("not a complete snapshot of etcd")

// Check reads the file at path and returns nil if it is a snapshot whose
// hash matches its content.
func Check(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	// A database holds at least a few pages of 4 KiB.
	if size < 16<<10+sha256.Size {
		return fmt.Errorf("%s: %w (%d bytes: too small; a backup of rivetctl backup or etcdctl snapshot save is wanted)", path, ErrBad, size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, size-sha256.Size)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tail := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, tail); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), tail) {
		return fmt.Errorf("%s: %w: its content does not match the hash it ends with (cut short, changed, or not a snapshot: a database file copied from a member has no hash)", path, ErrBad)
	}
	return nil
}

// Hash returns the hash a snapshot file ends with (hex): what tells one
// snapshot from another, whatever its name or time. It reads the last
// bytes only, and checks nothing (Check does).
func Hash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size() < sha256.Size {
		return "", fmt.Errorf("%s: %w (%d bytes)", path, ErrBad, fi.Size())
	}
	tail := make([]byte, sha256.Size)
	if _, err := f.ReadAt(tail, fi.Size()-sha256.Size); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(tail), nil
}
