package pebble

import (
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// checkpointFS is the store's file system: pebble's own, but for the files
// and folders a checkpoint (Backup) opens in its directory, which it keeps
// track of until the checkpoint returns and then closes if still open.
// Pebble leaves open the copy of its options file when writing it fails
// (a full backup volume), and the checkpoint's folder when it cannot make
// a marker file in it (a volume out of inodes): each such backup would
// hold a descriptor, and the space on the backup volume, which could then
// not be unmounted, for as long as the hub runs.
type checkpointFS struct {
	vfs.FS
	mu   sync.Mutex
	dir  string // the directory of the checkpoint under way; "" none
	open map[*checkpointFile]struct{}
}

// Create creates the file, kept track of when it is in the directory of
// the checkpoint under way.
func (c *checkpointFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return c.track(name)(c.FS.Create(name, category))
}

// OpenDir opens the folder, kept track of when it is the directory of the
// checkpoint under way or lies in it.
func (c *checkpointFS) OpenDir(name string) (vfs.File, error) {
	return c.track(name)(c.FS.OpenDir(name))
}

// track returns what keeps track of the file opened at name, if it is in
// the directory of the checkpoint under way.
func (c *checkpointFS) track(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil {
			return f, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dir == "" || !inside(c.dir, filepath.Clean(name)) {
			return f, nil
		}
		tracked := &checkpointFile{File: f, fs: c}
		c.open[tracked] = struct{}{}
		return tracked, nil
	}
}

// checkpoint runs take, a checkpoint into dir, and closes the files it
// created there and left open.
func (c *checkpointFS) checkpoint(dir string, take func() error) error {
	c.mu.Lock()
	c.dir, c.open = filepath.Clean(dir), map[*checkpointFile]struct{}{}
	c.mu.Unlock()
	err := take()
	c.mu.Lock()
	left := c.open
	for f := range left {
		f.closed = true
	}
	c.dir, c.open = "", nil
	c.mu.Unlock()
	for f := range left {
		_ = f.File.Close()
	}
	return err
}

// checkpointFile is a file a checkpoint created.
type checkpointFile struct {
	vfs.File
	fs     *checkpointFS
	closed bool // guarded by fs.mu
}

func (f *checkpointFile) Close() error {
	f.fs.mu.Lock()
	closed := f.closed
	f.closed = true
	delete(f.fs.open, f)
	f.fs.mu.Unlock()
	if closed {
		return nil
	}
	return f.File.Close()
}
