package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A backup onto a volume that is full, of bytes or of inodes, fails
// because of that volume, not because of the request nor of a fault of the
// hub: RESOURCE_EXHAUSTED saying so, as a backup onto the data volume
// without room for it is. Not INVALID_ARGUMENT (the folder could not be
// made), nor INTERNAL with the reason in the hub's log only.
func TestABackupOntoAFullVolumeIsRefusedAsStorageFull(t *testing.T) {
	for name, options := range map[string]string{
		"out of bytes":  "size=64k",
		"out of inodes": "size=64m,nr_inodes=3",
	} {
		t.Run(name, func(t *testing.T) {
			mnt := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", options, "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs here (%v %s)", err, out)
			}
			// Not detached lazily: the failed backup left nothing open on
			// the volume (an open file would keep it busy until the process
			// exits).
			t.Cleanup(func() {
				if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
					_ = exec.Command("umount", "-l", mnt).Run()
					t.Errorf("umount %s: %v %s", mnt, err, out)
				}
			})
			// Something else fills the backup volume.
			for i := 0; ; i++ {
				if err := os.WriteFile(filepath.Join(mnt, strconv.Itoa(i)), make([]byte, 4096), 0o600); err != nil {
					break
				}
			}
			r := start(t, testConfig(t))
			ctx := callContext(t)
			if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())}}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(mnt, "backup")
			_, err := adminClient(t, r).Backup(ctx, &adminv1.BackupRequest{Directory: dir})
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "no space left on device") {
				t.Fatalf("a backup onto a full volume: %v; want RESOURCE_EXHAUSTED saying there is no space left", err)
			}
		})
	}
}
