package diskguard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Backup implements store.Store. A backup onto another volume costs the
// data volume nothing and always passes. One onto the data volume itself
// shares the store's tables as hard links at first, but keeps them once
// compactions replace them in the store, so in time it takes as much as
// the data directory: it is refused, like a save, when that would leave
// less than the reserve free. Its bytes are not counted as written: the
// volume's next looks see what it really takes, as it grows.
func (s *guardedStore) Backup(ctx context.Context, dir string) error {
	same, err := SameVolume(s.g.dir, dir)
	if err != nil {
		return fmt.Errorf("backup directory %s: %w", dir, err)
	}
	if !same {
		return s.Store.Backup(ctx, dir)
	}
	n, err := DirBytes(s.g.dir)
	if err != nil {
		return fmt.Errorf("size of the data directory %s: %w", s.g.dir, err)
	}
	if err := s.g.take(n, s.g.reserve); err != nil {
		return fmt.Errorf("%w: a backup onto the data volume may come to take as much as the data "+
			"directory (%s), and that would leave less free than the %s kept in reserve (--min-free-disk): "+
			"back up onto another volume (%v)",
			domain.ErrStorageFull, FormatSize(n), FormatSize(s.g.reserve), err)
	}
	defer s.g.give(n, false)
	return s.Store.Backup(ctx, dir)
}

// DirBytes is the size of the regular files under dir. A dir that is a
// symbolic link (a data directory on a volume mounted elsewhere and linked
// into place) is the folder it leads to; links inside it are not followed.
func DirBytes(dir string) (uint64, error) {
	return dirBytes(os.DirFS(dir))
}

// dirBytes is DirBytes over the folder fsys.
func dirBytes(fsys fs.FS) (uint64, error) {
	var n uint64
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			var info fs.FileInfo
			if info, err = d.Info(); err == nil {
				n += uint64(info.Size()) //nolint:gosec // a file's size is not negative
			}
		}
		// The store and its documents remove files as they go (a table a
		// compaction replaced, a document build's temporary file): one
		// listed and gone before it is looked at takes no space.
		if p != "." && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	return n, err
}
