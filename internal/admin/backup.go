package admin

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Backuper copies the hub's data while it runs (store.Backup and, for the
// embedded store, the documents beside it). A relative dir is its to
// resolve (the proto: under the data directory's parent).
type Backuper interface {
	Backup(ctx context.Context, dir string) (BackupInfo, error)
}

// BackupInfo says what a backup wrote.
type BackupInfo struct {
	Dir   string // the absolute path
	Bytes int64  // the size of its files (some share the data's blocks, as hard links)
}

// Option configures the Service beyond its Hub.
type Option func(*Service)

// WithBackup serves Backup through b; without it Backup answers that the
// hub has nothing to back up (FAILED_PRECONDITION).
func WithBackup(b Backuper) Option { return func(s *Service) { s.backup = b } }

// Backup writes a consistent copy of the hub's data into a new directory.
func (s *Service) Backup(ctx context.Context, req *adminv1.BackupRequest) (*adminv1.BackupResponse, error) {
	if req.GetDirectory() == "" {
		return nil, fmt.Errorf("%w: directory is required: a path on the hub's host that does not exist yet", domain.ErrInvalidArgument)
	}
	if err := checkUTF8("directory", req.GetDirectory()); err != nil {
		return nil, err
	}
	if err := checkDirectoryName(req.GetDirectory()); err != nil {
		return nil, err
	}
	if s.backup == nil {
		return nil, fmt.Errorf("%w: this hub has no backup configured", domain.ErrNotSupported)
	}
	start := time.Now()
	info, err := s.backup.Backup(ctx, req.GetDirectory())
	if err != nil {
		return nil, err
	}
	return &adminv1.BackupResponse{Directory: info.Dir, Bytes: info.Bytes, TookMs: time.Since(start).Milliseconds()}, nil
}

// checkDirectoryName refuses a backup directory that names no folder an
// operator meant: one of no visible character (an empty variable in
// quotes), which a relative path would make beside the data directory, or
// one with a control character (a pasted line end), which no listing shows
// as it is.
func checkDirectoryName(dir string) error {
	if !visible(dir) {
		return domain.Invalid("directory %q has no visible character: name a path on the hub's host that does not exist yet", dir)
	}
	if i := strings.IndexFunc(dir, unicode.IsControl); i >= 0 {
		return domain.Invalid("directory %q has a control character (byte %d): name a path of visible characters", dir, i)
	}
	return nil
}
