package adversary

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/mem"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// notification is a bundleable time series notification for recipient.
func notification(recipient string) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "TimeSeries", DocumentType: "TimeSeriesDoc", SupportsBundling: true, Weight: 1,
	}
}

// Bundles are at most 51,200 in weight (--max-bundle-weight) and a Save at
// most 10,000 notifications.
const (
	maxBundleWeight = 51_200
	maxSave         = 10_000
)

// saveLargestBundle saves what makes the largest bundle the defaults allow
// for recipient: 51,200 notifications of weight 1, each with a document type
// of its own of the longest length (255), about 15 MiB encoded.
func saveLargestBundle(t *testing.T, h *hub, recipient string) {
	t.Helper()
	for saved := 0; saved < maxBundleWeight; {
		req := &messagehubv1.SaveRequest{}
		for i := saved; i < min(saved+maxSave, maxBundleWeight); i++ {
			n := notification(recipient)
			n.DocumentType = fmt.Sprintf("%08d", i) + strings.Repeat("d", 255-8)
			req.Notifications = append(req.Notifications, n)
		}
		resp, err := h.client.Save(ctxT(t), req)
		if err != nil {
			t.Fatalf("saving the largest bundle: %v", err)
		}
		if int(resp.GetSaved()) != len(req.Notifications) {
			t.Fatalf("saved %d of %d", resp.GetSaved(), len(req.Notifications))
		}
		saved += len(req.Notifications)
	}
}

// rawBytes is a request sent exactly as the test wrote it.
type rawBytes []byte

// rawCodec puts a test's bytes on the wire as a call's request and ignores
// the answer's bytes: it sends what no generated client can.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawBytes))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }
