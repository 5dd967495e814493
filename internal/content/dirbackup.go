package content

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CopyTo copies every stored document into dir, which must not exist, and
// returns their bytes: hard links where dir is on the folder's volume (a
// document is never changed once stored, only replaced or deleted, which
// leaves the link alone), else copies. Documents being written are left
// out. Everything it writes is synced before it returns. It stops when ctx
// ends (a backup's caller that stopped waiting holds up retention and
// releases no longer), removes dir and returns ctx's error.
func (s *DirStore) CopyTo(ctx context.Context, dir string) (int64, error) {
	if err := os.Mkdir(dir, 0o750); err != nil {
		return 0, fmt.Errorf("copy documents: %w", err)
	}
	var n int64
	dirs := []string{dir}
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			err = ctx.Err()
		}
		switch {
		case err != nil:
			return err
		case p == ".":
			return nil
		case d.IsDir():
			dirs = append(dirs, filepath.Join(dir, p))
			return os.Mkdir(filepath.Join(dir, p), 0o750)
		case !d.Type().IsRegular() || strings.HasSuffix(p, tempSuffix):
			return nil
		}
		size, err := s.copyFile(ctx, p, filepath.Join(dir, p))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile (retention)
		}
		n += size
		return err
	})
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = SyncFolder(dirs[i])
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return 0, fmt.Errorf("copy documents: %w", err)
	}
	return n, nil
}

// copyFile links the document at p to dst, or copies it (synced) when
// linking fails: across volumes, on a filesystem without hard links or at
// its limit of links, each of which answers its own error (EXDEV, EPERM,
// EOPNOTSUPP, EMLINK, Windows' ERROR_NOT_SAME_DEVICE). A copy is always
// right, only slower; a document gone meanwhile, or a file already at
// dst, is not copied.
func (s *DirStore) copyFile(ctx context.Context, p, dst string) (int64, error) {
	src := filepath.Join(s.root.Name(), p)
	info, err := os.Stat(src)
	if err != nil {
		return 0, err
	}
	err = s.linkOut(src, dst)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) {
		return info.Size(), err
	}
	in, err := s.root.Open(p)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640) //nolint:gosec // the operator's backup directory
	if err != nil {
		return 0, err
	}
	size, err := io.Copy(out, contextReader{ctx, in})
	if err != nil {
		_ = out.Close()
		return 0, err
	}
	return size, syncClose(out)
}

// contextReader reads r until ctx ends, so that a large document's copy
// stops with it too.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// SyncFolder syncs a folder, so that the names made in it last.
func SyncFolder(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // the operator's folder
	if err != nil {
		return err
	}
	return syncClose(d)
}

// syncClose syncs f and closes it.
func syncClose(f *os.File) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
