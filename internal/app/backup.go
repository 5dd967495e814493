package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// backup copies what the hub keeps (the Admin service's Backup): the
// store, and the embedded store's documents beside it. A restore is the
// copy as --data-dir (docs/operations.md).
type backup struct {
	dataDir string
	store   store.Store
	docs    *content.DirStore // nil: no documents kept beside the store
	// copying is held by a backup from the copy of the documents to the
	// end of the store's checkpoint, and shared by every removal of
	// documents (forget): retention removes a bundle's document before its
	// record, and one that did so in between would leave in the copy a
	// document of a bundle the checkpoint no longer holds.
	copying *sync.RWMutex
}

// forget is remove (content.Forget) made to wait for a backup copying the
// documents.
func (b backup) forget(remove forgetFunc) forgetFunc {
	return func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error {
		b.copying.RLock()
		defer b.copying.RUnlock()
		return remove(ctx, recipient, bundleIDs, asRead)
	}
}

// forgetFunc removes bundles' documents (hub.Options.ForgetBundles).
type forgetFunc = func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error

// documentsFolder is the documents' folder in the data directory.
const documentsFolder = "content"

// Backup resolves a relative dir under the data directory's parent, so that
// "backup-1" lands beside the data directory. The documents are copied
// before the store: each belongs to a bundle that exists at the store's
// checkpoint, which is what a document in the copy must do (an actor may
// peek with its own bundle id again, and must not get a document of another
// bundle); removals of documents wait meanwhile (copying). A document built in between is built again, from its domain, at
// the bundle's next content peek.
func (b backup) Backup(ctx context.Context, dir string) (admin.BackupInfo, error) {
	if !filepath.IsAbs(dir) {
		data, err := filepath.Abs(b.dataDir)
		if err != nil {
			return admin.BackupInfo{}, err
		}
		dir = filepath.Join(filepath.Dir(data), dir)
	}
	dir = filepath.Clean(dir)
	if b.docs == nil {
		return b.written(volumeFull(b.store.Backup(ctx, dir)), dir)
	}
	// Refused before the documents are written beside it: a directory
	// inside the data directory would leave folders there (in the
	// documents' own folder, a copy of the copy as it is made).
	if err := pebble.CheckBackupDir(b.dataDir, dir); err != nil {
		return admin.BackupInfo{}, err
	}
	// A directory the hub cannot make (a parent that is a file, one its
	// user may not write) is the operator's to correct, not the hub's fault.
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return admin.BackupInfo{}, fmt.Errorf("%w: backup directory %s cannot be made: %w", cannotMake(err), dir, err)
	}
	// The backup is made in a folder beside dir and takes dir's name by one
	// rename once whole: a backup cut short (the hub killed, the machine
	// down) leaves only that folder, never a directory under the name given
	// that could be taken for a whole backup and open as a store missing
	// its last writes.
	staging, err := os.MkdirTemp(filepath.Dir(dir), ".messagehub-backup-partial-*")
	if err != nil {
		return admin.BackupInfo{}, fmt.Errorf("%w: backup directory %s cannot be made: %w", cannotMake(err), dir, err)
	}
	defer func() { _ = os.RemoveAll(staging) }()
	if err := b.backupInto(ctx, staging, dir); errors.Is(err, domain.ErrInvalidArgument) {
		return admin.BackupInfo{}, err // a refusal names the directory itself
	} else if err != nil {
		return admin.BackupInfo{}, volumeFull(fmt.Errorf("backup directory %s: %w", dir, err))
	}
	return b.written(nil, dir)
}

// A backup volume that is full, of bytes or of inodes (or the user's quota
// on it), is neither the request's fault nor the hub's: the backup is
// refused as storage full, and the operator told why.
func fullVolume(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// volumeFull marks err as storage full when a full volume caused it.
func volumeFull(err error) error {
	if fullVolume(err) {
		return fmt.Errorf("%w: %w", domain.ErrStorageFull, err)
	}
	return err
}

// cannotMake is why a backup directory could not be made: a full volume,
// else the operator's path to correct (a parent that is a file, one the
// hub's user may not write).
func cannotMake(err error) error {
	if fullVolume(err) {
		return domain.ErrStorageFull
	}
	return domain.ErrInvalidArgument
}

// backupInto makes the backup in staging, then renames it to dir.
func (b backup) backupInto(ctx context.Context, staging, dir string) error {
	b.copying.Lock()
	defer b.copying.Unlock()
	docs := filepath.Join(staging, documentsFolder)
	if _, err := b.docs.CopyTo(ctx, docs); err != nil {
		return err
	}
	whole := filepath.Join(staging, "backup")
	if err := b.store.Backup(ctx, whole); err != nil {
		return err
	}
	if err := os.Rename(docs, filepath.Join(whole, documentsFolder)); err != nil {
		return err
	}
	if err := content.SyncFolder(whole); err != nil {
		return err
	}
	// A caller that stopped waiting (Ctrl-C, its deadline) was told the
	// backup failed: none is left behind to be mistaken for one it got.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("the caller stopped waiting for the backup, which was not kept: %w", err)
	}
	// Checked again: a backup into the same directory that began before
	// this one had it made (backups wait for each other here) took it
	// meanwhile, and this one is refused as it would have been after.
	if err := pebble.CheckBackupDir(b.dataDir, dir); err != nil {
		return err
	}
	if err := os.Rename(whole, dir); err != nil {
		return err
	}
	return content.SyncFolder(filepath.Dir(dir))
}

// written says what a backup into dir wrote, unless err says it failed.
func (b backup) written(err error, dir string) (admin.BackupInfo, error) {
	if err != nil {
		return admin.BackupInfo{}, err
	}
	n, err := diskguard.DirBytes(dir)
	if err != nil {
		return admin.BackupInfo{}, err
	}
	return admin.BackupInfo{Dir: dir, Bytes: int64(n)}, nil //nolint:gosec // far below 2^63
}
