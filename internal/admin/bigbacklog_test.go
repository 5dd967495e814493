package admin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// A recipient's cabinets are not bounded: every content type a domain
// saves for it is one. The backlog of one with 16,000 cabinets of the
// longest content types (about 4.4 MB as a list) is answered within a
// client's default message limit of 4 MiB: the oldest
// hub.MaxBacklogCabinets cabinets, and how many there are.
func TestTheBacklogOfARecipientOfManyCabinetsFitsADefaultClient(t *testing.T) {
	client, h := serve(t) // a client with gRPC's default limits
	ctx := ctxT(t)
	recipient := uuid.NewString()
	const cabinets, perSave = 16_000, 8_000
	for first := 0; first < cabinets; first += perSave {
		ns := make([]domain.Notification, perSave)
		for i := range ns {
			ct := fmt.Sprintf("%06d-", first+i)
			ns[i] = domain.Notification{
				ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
				ContentType: ct + strings.Repeat("x", domain.MaxContentTypeLength-len(ct)), Weight: 1,
			}
		}
		if _, err := h.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	b, err := client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: recipient})
	if err != nil {
		t.Fatalf("GetBacklog of a recipient of %d cabinets: %v", cabinets, err)
	}
	if len(b.GetCabinets()) != hub.MaxBacklogCabinets || b.GetCabinetCount() != cabinets {
		t.Fatalf("GetBacklog lists %d cabinets of %d; want %d of %d", len(b.GetCabinets()), b.GetCabinetCount(), hub.MaxBacklogCabinets, cabinets)
	}
	for i, c := range b.GetCabinets() {
		// Saved in the order of their names: the oldest first.
		if want := fmt.Sprintf("%06d-", i); !strings.HasPrefix(c.GetContentType(), want) || c.GetWaiting() != 1 || c.GetWaitingWeight() != 1 {
			t.Fatalf("cabinet %d listed: %s, %d waiting of weight %d; want %s…, 1 of weight 1", i, c.GetContentType()[:7], c.GetWaiting(), c.GetWaitingWeight(), want)
		}
	}
}
