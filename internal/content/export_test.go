package content

import (
	"os"
	"syscall"
)

// OnDirStoreStep has step called at the named steps of the store's
// removals.
func OnDirStoreStep(s *DirStore, step func(string)) { s.step = step }

// WithoutHardLinks has the store's links fail as link(2) does on a
// filesystem without hard links (FAT, exFAT, an SMB share such as Azure
// Files): EPERM.
func WithoutHardLinks(s *DirStore) {
	s.link = func(from, to string) error {
		return &os.LinkError{Op: "linkat", Old: from, New: to, Err: syscall.EPERM}
	}
}

// SetBackupLink has a backup (CopyTo) link its documents out of the folder
// with link instead of os.Link.
func SetBackupLink(s *DirStore, link func(oldname, newname string) error) { s.linkOut = link }

// BuildMemoryFree says whether none of the builds' memory
// (Options.MaxBuildMemory) is held.
func BuildMemoryFree(s *Service) bool {
	if !s.memory.TryAcquire(s.opts.MaxBuildMemory) {
		return false
	}
	s.memory.Release(s.opts.MaxBuildMemory)
	return true
}
