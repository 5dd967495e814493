package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Backup needs a directory, and says so when the hub has nothing to back
// up with; neither reaches a Backuper.
func TestBackupRefusesAMissingDirectoryAndAHubWithoutBackup(t *testing.T) {
	ctx := context.Background()
	if _, err := admin.NewService(nil).Backup(ctx, &adminv1.BackupRequest{}); !errors.Is(err, domain.ErrInvalidArgument) {
		t.Fatalf("no directory: %v; want ErrInvalidArgument", err)
	}
	if _, err := admin.NewService(nil).Backup(ctx, &adminv1.BackupRequest{Directory: "b"}); !errors.Is(err, domain.ErrNotSupported) {
		t.Fatalf("no backup configured: %v; want ErrNotSupported", err)
	}
}

// refusingBackuper fails the test if a backup reaches it.
type refusingBackuper struct{ t *testing.T }

func (b refusingBackuper) Backup(_ context.Context, dir string) (admin.BackupInfo, error) {
	b.t.Errorf("a backup into %q was made; want it refused first", dir)
	return admin.BackupInfo{}, nil
}

// A directory with no visible character, or with a control character in
// it, is no name an operator meant (an empty shell variable in quotes, a
// pasted line end): refused before anything is written, where a relative
// one was made as a folder of that name beside the data directory.
func TestBackupRefusesADirectoryOfNoVisibleName(t *testing.T) {
	s := admin.NewService(nil, admin.WithBackup(refusingBackuper{t}))
	for _, dir := range []string{" ", "\t", " \u00a0", "\u200b", "/backups/\n", "backup-1\r", "/backups/a\x1bb"} {
		_, err := s.Backup(context.Background(), &adminv1.BackupRequest{Directory: dir})
		if !errors.Is(err, domain.ErrInvalidArgument) || !strings.Contains(err.Error(), "directory") {
			t.Errorf("a backup into %q: %v; want ErrInvalidArgument about the directory", dir, err)
		}
	}
}
