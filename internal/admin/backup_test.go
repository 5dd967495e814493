package admin_test

import (
	"context"
	"errors"
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
