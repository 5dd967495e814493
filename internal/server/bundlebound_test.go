package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// The largest bundle an operator can configure (domain.HighestMaxBundleWeight
// notifications of weight 1), each with a document type of its own of the
// longest length, fits in one Peek answer: a bundle the server cannot send
// would make its recipient's every Peek fail.
func TestTheLargestConfigurableBundleFitsAPeekAnswer(t *testing.T) {
	n := domain.HighestMaxBundleWeight
	b := &messagehubv1.Bundle{
		Id: "00000000-0000-4000-8000-000000000000", Recipient: "00000000-0000-4000-8000-000000000001",
		ContentType: strings.Repeat("c", domain.MaxContentTypeLength), Weight: int64(n),
		NotificationIds: make([]string, n), DocumentTypes: make([]string, n),
	}
	pad := strings.Repeat("d", domain.MaxContentTypeLength-8)
	for i := range n {
		b.NotificationIds[i] = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		b.DocumentTypes[i] = fmt.Sprintf("%08x%s", i, pad)
	}
	size := proto.Size(&messagehubv1.PeekResponse{Bundle: b})
	t.Logf("the largest bundle's answer: %d bytes of %d", size, MaxSendMsgSize)
	if size > MaxSendMsgSize {
		t.Fatalf("a bundle of %d notifications with distinct document types is %d bytes, over the %d a Peek answer may be", n, size, MaxSendMsgSize)
	}
}
