package app_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A content or document type of letters outside [A-Za-z0-9._:-] is refused
// for its characters, however long it is in bytes: 128 of "é" are 128
// characters, within the 255 the type may have, and the refusal names the
// rule they break, not a length they do not have. Nothing is stored.
func TestATypeOfOtherLettersIsRefusedForItsCharacters(t *testing.T) {
	r := start(t, testConfig(t))
	for _, tc := range []struct {
		name string
		edit func(n *messagehubv1.DataAvailable)
	}{
		{"content_type", func(n *messagehubv1.DataAvailable) { n.ContentType = strings.Repeat("é", 128) }},
		{"document_type", func(n *messagehubv1.DataAvailable) { n.DocumentType = "a" + strings.Repeat("ü", 200) }},
	} {
		recipient := uuid.NewString()
		n := notification(recipient)
		tc.edit(n)
		_, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}})
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, tc.name+" may only hold [A-Za-z0-9._:-]") {
			t.Errorf("%s of other letters: %v; want InvalidArgument naming the characters it may hold", tc.name, err)
		}
		if strings.Contains(msg, "\\x") {
			t.Errorf("%s of other letters: the message %q quotes a letter cut in two", tc.name, msg)
		}
		if p, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient}); err != nil || p.GetBundle() != nil {
			t.Errorf("Peek after the refusal: %v %v; want nothing stored", p, err)
		}
	}
}
