package diskguard

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// removingFS is a folder on disk in which a file is removed right after
// its folder is listed, as pebble removes a table a compaction replaced,
// or a document build its temporary file, while a backup measures the
// data directory.
type removingFS struct {
	fs.FS
	dir, remove string
}

func (f removingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(f.FS, name)
	if err == nil && f.remove != "" {
		err = os.Remove(filepath.Join(f.dir, f.remove))
	}
	return entries, err
}

// A file removed while the data directory is measured takes no space: the
// size is what is left, not an error that fails the backup.
func TestAFileRemovedWhileTheDataDirectoryIsMeasuredIsNotCounted(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{"kept": 100, "going.sst": 50} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := dirBytes(removingFS{FS: os.DirFS(dir), dir: dir, remove: "going.sst"})
	if err != nil || n != 100 {
		t.Fatalf("dirBytes with a file removed during the walk = %d, %v; want 100, nil", n, err)
	}
}
