package pebble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/domain"
)

// A backup is a pebble checkpoint: the tables hard-linked (copied when dir
// is on another volume), the write-ahead log and the manifest copied, all
// synced. It is what a crash at that moment would have left, which the
// store is built to open: every write is one atomic batch, and a write
// whose batch is not in the copy was never answered as done.
//
// The store's own file beside pebble's, the saved id index, is only
// valid with a token that Open deletes from a store opened for writing:
// a copy of a running store has none, and a store opened on it indexes
// the stored ids.
//
// A store opened read-only (a data volume full at start) changes none of
// its files, and pebble cannot checkpoint it (it has no options file of
// its own): its files are linked (or copied) as they are, the id index
// with the token that matches it.

// Backup implements store.Store: it checkpoints the database into dir.
func (s *Store) Backup(ctx context.Context, dir string) error {
	if err := CheckBackupDir(s.dir, dir); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Close waits for a backup under way, so that the database and the id
	// index file are not closed or rewritten under it.
	s.backupMu.Lock()
	defer s.backupMu.Unlock()
	if s.closed {
		return fmt.Errorf("%w: the embedded store is closing", domain.ErrUnavailable)
	}
	var err error
	if s.readOnly {
		err = copyFiles(s.dir, dir)
	} else {
		// Writes answered before the call are synced already; this makes
		// it so for anything pebble holds unsynced too.
		err = s.fs.checkpoint(dir, func() error { return s.db.Checkpoint(dir, pebble.WithFlushedWAL()) })
	}
	if err != nil {
		return fmt.Errorf("back up the embedded store to %s: %w", dir, err)
	}
	s.logger.Info("embedded store backed up", "dir", dir)
	return nil
}

// copyFiles links (or copies) the files of the store's directory src into
// a new directory dst, but for the lock and the pid file, which belong to
// the process, and files being written; folders (the documents') are left
// out. It removes dst if it fails.
func copyFiles(src, dst string) (err error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dst)
		}
	}()
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || name == "LOCK" || name == pidFile || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if err := linkIfPresent(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	d, err := os.Open(dst) //nolint:gosec // the operator's backup directory
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CheckBackupDir refuses a backup directory dir of the store in dataDir
// that is relative, exists, or lies inside dataDir (the copy would be part
// of what it copies), as Backup does: for a caller that writes beside the
// store's backup (the documents) and must refuse before it writes anything.
func CheckBackupDir(dataDir, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%w: backup directory %q is not an absolute path", domain.ErrInvalidArgument, dir)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%w: backup directory %s exists already; name a new one", domain.ErrInvalidArgument, dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		// A path through a file, or one the system refuses: the operator's
		// to correct.
		return fmt.Errorf("%w: backup directory %s: %w", domain.ErrInvalidArgument, dir, err)
	}
	own, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	// Compared as written and with symbolic links resolved: a data
	// directory reached through a link (a volume mounted elsewhere and
	// linked into place), or a backup directory named through one, is the
	// same folder.
	if inside(own, filepath.Clean(dir)) || inside(resolved(own), resolved(dir)) || sameFolderAbove(own, dir) {
		return fmt.Errorf("%w: backup directory %s is inside the data directory %s; name one outside it", domain.ErrInvalidArgument, dir, own)
	}
	return nil
}

// sameFolderAbove says whether the folder dir, or one it lies in, is the
// folder own by its identity on disk: the data directory named through
// another mount of it (a bind mount, a container's second volume on a
// folder of it), which no path comparison sees.
func sameFolderAbove(own, dir string) bool {
	ownInfo, err := os.Stat(own)
	if err != nil {
		return false // no data directory yet: nothing to lie inside
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if info, err := os.Stat(p); err == nil && os.SameFile(info, ownInfo) {
			return true
		}
		if filepath.Dir(p) == p {
			return false
		}
	}
}

// inside says whether path is dir or lies under it.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolved is the absolute path p with the symbolic links of its nearest
// existing parent resolved, and the rest (not made yet) as written.
func resolved(p string) string {
	rest := ""
	for dir := filepath.Clean(p); ; dir = filepath.Dir(dir) {
		if target, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(target, rest)
		}
		if filepath.Dir(dir) == dir {
			return filepath.Clean(p)
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// linkIfPresent hard-links src to dst, or copies it across volumes; a
// missing src is no error.
func linkIfPresent(src, dst string) error {
	err := os.Link(src, dst)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return writeFileSync(dst, func(w io.Writer) error {
		f, err := os.Open(src) //nolint:gosec // the operator's data directory
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
}
