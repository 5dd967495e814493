package app_test

import (
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/codec"
	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A remedy's reason or a backup directory that is not UTF-8, which protobuf's
// strings may not hold but a client whose codec does not check them (the
// hub's own) can send, is refused with INVALID_ARGUMENT and changes nothing:
// a remedy is not done with a reason the audit log cannot record as given.
func TestAdminTextThatIsNotUTF8IsRefused(t *testing.T) {
	r := start(t, testConfig(t))
	conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec.New())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	adm := adminv1.NewAdminClient(conn)

	actor := uuid.NewString()
	n := notification(actor)
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}}); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: actor})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", peeked, err)
	}
	bundleID := peeked.GetBundle().GetId()

	_, err = adm.ReleaseBundle(callContext(t), &adminv1.ReleaseBundleRequest{Recipient: actor, BundleId: bundleID, Reason: "stuck \xff"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ReleaseBundle with a reason that is not UTF-8: %v; want InvalidArgument", err)
	}
	_, err = adm.AcknowledgeOnBehalf(callContext(t), &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: actor, Domain: n.GetOrigin(), ContentType: n.GetContentType(), UpToNotificationId: n.GetId(), Reason: "\xc3",
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("AcknowledgeOnBehalf with a reason that is not UTF-8: %v; want InvalidArgument", err)
	}

	// Nothing changed: the bundle is still pending.
	again, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: actor})
	if err != nil || again.GetBundle().GetId() != bundleID {
		t.Errorf("Peek after the refusals: %v %v; want the pending bundle %s", again, err, bundleID)
	}
	// Nor is a remedy recorded.
	events, err := adm.ListAuditEvents(callContext(t), &adminv1.ListAuditEventsRequest{Recipient: actor})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.GetEvents() {
		t.Errorf("audit event %v; want none", e)
	}

	// A backup directory that is not UTF-8 is refused before anything is written.
	_, err = adm.Backup(callContext(t), &adminv1.BackupRequest{Directory: "backup-\xff"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Backup to a directory that is not UTF-8: %v; want InvalidArgument", err)
	}
}
