package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// One process per store backend serves the contract tests; each test uses
// its own recipients.
func TestContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testContract(t, startHub(t, b.args()...)) })
	}
}

func testContract(t *testing.T, h *hub) {
	t.Run("health reports SERVING for the server and the service", func(t *testing.T) { testHealth(t, h) })
	t.Run("save, peek and dequeue round-trip every field", func(t *testing.T) { testRoundTrip(t, h) })
	t.Run("invalid requests are INVALID_ARGUMENT and change nothing", func(t *testing.T) { testInvalidArgument(t, h) })
	t.Run("a conflicting notification id is ALREADY_EXISTS", func(t *testing.T) { testNotificationConflict(t, h) })
	t.Run("a reused bundle id is ALREADY_EXISTS", func(t *testing.T) { testBundleIDInUse(t, h) })
	t.Run("another pending bundle is FAILED_PRECONDITION", func(t *testing.T) { testOtherBundlePending(t, h) })
	t.Run("dequeue of a bundle that is not pending is NOT_FOUND", func(t *testing.T) { testDequeueNotFound(t, h) })
	t.Run("a peek naming a bundle id with nothing ready keeps the id usable", func(t *testing.T) { testPeekNothingKeepsBundleID(t, h) })
	t.Run("a full save of 10,000 notifications is delivered in order", func(t *testing.T) { testFullSave(t, h) })
}

func notification(recipient string, origin messagehubv1.Domain, contentType string) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id: newID(), Recipient: recipient, Origin: origin, ContentType: contentType,
		DocumentType: contentType + "Doc", SupportsBundling: true, Weight: 1,
	}
}

func save(t *testing.T, h *hub, ns ...*messagehubv1.DataAvailable) *messagehubv1.SaveResponse {
	t.Helper()
	resp, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: ns})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	return resp
}

func peek(t *testing.T, h *hub, recipient string, group messagehubv1.PeekGroup, bundleID string) *messagehubv1.Bundle {
	t.Helper()
	resp, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, Group: group, BundleId: bundleID})
	if err != nil {
		t.Fatalf("Peek(%s, %s, %q): %v", recipient, group, bundleID, err)
	}
	return resp.GetBundle()
}

func dequeue(t *testing.T, h *hub, recipient, bundleID string) {
	t.Helper()
	if _, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID}); err != nil {
		t.Fatalf("Dequeue(%s, %s): %v", recipient, bundleID, err)
	}
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code = %s, want %s (err: %v)", got, want, err)
	}
}

func wantNoBundle(t *testing.T, h *hub, recipient string) {
	t.Helper()
	if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, ""); b != nil {
		t.Fatalf("peek returned %v, want no bundle", b)
	}
}

func testHealth(t *testing.T, h *hub) {
	for _, name := range []string{"", "messagehub.v1.MessageHub"} {
		resp, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatalf("Check(%q): %v", name, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %s, want SERVING", name, resp.GetStatus())
		}
	}
}

func testRoundTrip(t *testing.T, h *hub) {
	recipient := newID()
	ns := []*messagehubv1.DataAvailable{
		// Upper-case ids are accepted and normalised to lower case.
		{Id: strings.ToUpper(newID()), Recipient: strings.ToUpper(recipient), Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS,
			ContentType: "MeteringPoint", DocumentType: "Create", SupportsBundling: true, Weight: 10},
		{Id: newID(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS,
			ContentType: "MeteringPoint", DocumentType: "Update", SupportsBundling: true, Weight: 20},
		{Id: newID(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS,
			ContentType: "MeteringPoint", DocumentType: "Create", SupportsBundling: true, Weight: 30},
		// An empty document type defaults to the content type.
		{Id: newID(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS,
			ContentType: "MeteringPoint", SupportsBundling: true, Weight: 40},
	}
	resp := save(t, h, ns...)
	if resp.GetSaved() != 4 || resp.GetDuplicates() != 0 {
		t.Fatalf("save = %v, want 4 saved", resp)
	}
	// Saving the same notifications again only counts duplicates.
	if resp := save(t, h, ns...); resp.GetSaved() != 0 || resp.GetDuplicates() != 4 {
		t.Fatalf("second save = %v, want 4 duplicates", resp)
	}

	b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA, "")
	if b == nil {
		t.Fatal("peek returned no bundle")
	}
	if _, err := uuid.Parse(b.GetId()); err != nil || len(b.GetId()) != 36 || strings.ToLower(b.GetId()) != b.GetId() {
		t.Errorf("bundle id %q is not a lower-case canonical UUID", b.GetId())
	}
	want := &messagehubv1.Bundle{
		Id: b.GetId(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS, ContentType: "MeteringPoint",
		DocumentTypes:   []string{"Create", "Update", "MeteringPoint"},
		NotificationIds: []string{strings.ToLower(ns[0].GetId()), ns[1].GetId(), ns[2].GetId(), ns[3].GetId()},
		Weight:          100,
	}
	if !proto.Equal(b, want) {
		t.Fatalf("bundle = %v\nwant %v", b, want)
	}
	// Until it is dequeued, every peek of its group (and of ALL) returns it.
	for _, g := range []messagehubv1.PeekGroup{messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA, messagehubv1.PeekGroup_PEEK_GROUP_ALL, messagehubv1.PeekGroup_PEEK_GROUP_UNSPECIFIED} {
		if again := peek(t, h, recipient, g, ""); !proto.Equal(again, want) {
			t.Errorf("peek %s = %v, want the pending bundle", g, again)
		}
	}
	// Other groups see nothing.
	if other := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, ""); other != nil {
		t.Errorf("peek TIME_SERIES = %v, want nothing", other)
	}
	dequeue(t, h, strings.ToUpper(recipient), strings.ToUpper(b.GetId()))
	wantNoBundle(t, h, recipient)
	// Duplicates saved after the dequeue are never delivered again.
	save(t, h, ns...)
	wantNoBundle(t, h, recipient)
}

func testInvalidArgument(t *testing.T, h *hub) {
	recipient := newID()
	valid := func(f func(n *messagehubv1.DataAvailable)) *messagehubv1.SaveRequest {
		n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
		f(n)
		// A valid notification first: the whole save must be rejected.
		return &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
			notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"), n,
		}}
	}
	tooMany := make([]*messagehubv1.DataAvailable, 10_001)
	for i := range tooMany {
		tooMany[i] = notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	}
	saves := []struct {
		name string
		req  *messagehubv1.SaveRequest
	}{
		{"an empty save", &messagehubv1.SaveRequest{}},
		{"a save of 10,001 notifications", &messagehubv1.SaveRequest{Notifications: tooMany}},
		{"a notification id that is not a UUID", valid(func(n *messagehubv1.DataAvailable) { n.Id = "42" })},
		{"a recipient that is not a UUID", valid(func(n *messagehubv1.DataAvailable) { n.Recipient = "GLN-5790000000005" })},
		{"a missing recipient", valid(func(n *messagehubv1.DataAvailable) { n.Recipient = "" })},
		{"an unspecified origin", valid(func(n *messagehubv1.DataAvailable) { n.Origin = messagehubv1.Domain_DOMAIN_UNSPECIFIED })},
		{"an undefined origin", valid(func(n *messagehubv1.DataAvailable) { n.Origin = 42 })},
		{"an empty content type", valid(func(n *messagehubv1.DataAvailable) { n.ContentType = "" })},
		{"a content type outside the charset", valid(func(n *messagehubv1.DataAvailable) { n.ContentType = "text/xml" })},
		{"a content type of 256 characters", valid(func(n *messagehubv1.DataAvailable) { n.ContentType = strings.Repeat("x", 256) })},
		{"a document type outside the charset", valid(func(n *messagehubv1.DataAvailable) { n.DocumentType = "a b" })},
		{"weight 0", valid(func(n *messagehubv1.DataAvailable) { n.Weight = 0 })},
		{"weight 2^31", valid(func(n *messagehubv1.DataAvailable) { n.Weight = 1 << 31 })},
	}
	for _, tt := range saves {
		t.Run("save with "+tt.name, func(t *testing.T) {
			_, err := h.client.Save(ctxT(t), tt.req)
			wantCode(t, err, codes.InvalidArgument)
		})
	}
	peeks := []struct {
		name string
		req  *messagehubv1.PeekRequest
	}{
		{"no recipient", &messagehubv1.PeekRequest{}},
		{"a recipient that is not a UUID", &messagehubv1.PeekRequest{Recipient: "not-a-uuid"}},
		{"an undefined group", &messagehubv1.PeekRequest{Recipient: recipient, Group: 9}},
		{"a bundle id that is not a UUID", &messagehubv1.PeekRequest{Recipient: recipient, BundleId: "b-1"}},
	}
	for _, tt := range peeks {
		t.Run("peek with "+tt.name, func(t *testing.T) {
			_, err := h.client.Peek(ctxT(t), tt.req)
			wantCode(t, err, codes.InvalidArgument)
		})
	}
	dequeues := []struct {
		name string
		req  *messagehubv1.DequeueRequest
	}{
		{"no recipient", &messagehubv1.DequeueRequest{BundleId: newID()}},
		{"no bundle id", &messagehubv1.DequeueRequest{Recipient: recipient}},
		{"a bundle id that is not a UUID", &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"}},
	}
	for _, tt := range dequeues {
		t.Run("dequeue with "+tt.name, func(t *testing.T) {
			_, err := h.client.Dequeue(ctxT(t), tt.req)
			wantCode(t, err, codes.InvalidArgument)
		})
	}
	// None of the rejected saves stored anything.
	wantNoBundle(t, h, recipient)
}

func testNotificationConflict(t *testing.T, h *hub) {
	t.Run("two different notifications under one id in one save", func(t *testing.T) {
		recipient := newID()
		first := notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges")
		other := proto.Clone(first).(*messagehubv1.DataAvailable)
		other.Weight = 2
		_, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
			notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges"), first, other,
		}})
		wantCode(t, err, codes.AlreadyExists)
		wantNoBundle(t, h, recipient) // the whole save was rejected
	})
	t.Run("an id stored earlier with different content", func(t *testing.T) {
		recipient := newID()
		first := notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges")
		save(t, h, first)
		changed := proto.Clone(first).(*messagehubv1.DataAvailable)
		changed.DocumentType = "SomethingElse"
		fresh := notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges")
		_, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{fresh, changed}})
		wantCode(t, err, codes.AlreadyExists)
		// Only the first save is visible: the fresh notification of the rejected save is not.
		b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
		if got := b.GetNotificationIds(); !slices.Equal(got, []string{first.GetId()}) {
			t.Errorf("bundle holds %v, want only %s", got, first.GetId())
		}
	})
}

func testBundleIDInUse(t *testing.T, h *hub) {
	recipient := newID()
	save(t, h,
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(recipient, messagehubv1.Domain_DOMAIN_MARKET_ROLES, "MarketRole"),
	)
	pendingID := newID()
	if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, pendingID); b.GetId() != pendingID {
		t.Fatalf("peek returned bundle %q, want the id asked for %s", b.GetId(), pendingID)
	}
	t.Run("pending in another group", func(t *testing.T) {
		_, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, Group: messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA, BundleId: pendingID})
		wantCode(t, err, codes.AlreadyExists)
	})
	dequeue(t, h, recipient, pendingID)
	t.Run("already dequeued", func(t *testing.T) {
		save(t, h, notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))
		_, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, Group: messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, BundleId: pendingID})
		wantCode(t, err, codes.AlreadyExists)
	})
	t.Run("bundle ids are unique per recipient only", func(t *testing.T) {
		other := newID()
		save(t, h, notification(other, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))
		if b := peek(t, h, other, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, pendingID); b.GetId() != pendingID {
			t.Errorf("another recipient got bundle %q, want %s", b.GetId(), pendingID)
		}
	})
}

func testOtherBundlePending(t *testing.T, h *hub) {
	recipient := newID()
	save(t, h,
		notification(recipient, messagehubv1.Domain_DOMAIN_AGGREGATIONS, "Aggregation"),
		notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges"),
	)
	pendingID := newID()
	if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS, pendingID); b.GetId() != pendingID {
		t.Fatalf("peek returned bundle %q, want %s", b.GetId(), pendingID)
	}
	for _, g := range []messagehubv1.PeekGroup{
		messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS,
		messagehubv1.PeekGroup_PEEK_GROUP_ALL,
		messagehubv1.PeekGroup_PEEK_GROUP_UNSPECIFIED,
	} {
		t.Run(fmt.Sprintf("a new bundle id in %s", g), func(t *testing.T) {
			_, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, Group: g, BundleId: newID()})
			wantCode(t, err, codes.FailedPrecondition)
		})
	}
	t.Run("the pending bundle's own id returns it", func(t *testing.T) {
		if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS, pendingID); b.GetId() != pendingID {
			t.Errorf("got bundle %q, want %s", b.GetId(), pendingID)
		}
	})
	t.Run("checked before ALREADY_EXISTS", func(t *testing.T) {
		// A used id in a group with a different pending bundle is FAILED_PRECONDITION.
		usedID := newID()
		if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA, usedID); b.GetId() != usedID {
			t.Fatalf("got bundle %q, want %s", b.GetId(), usedID)
		}
		_, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient, Group: messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS, BundleId: usedID})
		wantCode(t, err, codes.FailedPrecondition)
	})
	t.Run("another group is free", func(t *testing.T) {
		save(t, h, notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))
		id := newID()
		if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, id); b.GetId() != id {
			t.Errorf("got bundle %q, want %s", b.GetId(), id)
		}
	})
}

func testDequeueNotFound(t *testing.T, h *hub) {
	recipient, other := newID(), newID()
	save(t, h, notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))
	b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	if b == nil {
		t.Fatal("no bundle")
	}
	t.Run("an unknown bundle", func(t *testing.T) {
		_, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: newID()})
		wantCode(t, err, codes.NotFound)
	})
	t.Run("another recipient's bundle", func(t *testing.T) {
		_, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: other, BundleId: b.GetId()})
		wantCode(t, err, codes.NotFound)
		// The bundle is still pending for its own recipient.
		if again := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, ""); again.GetId() != b.GetId() {
			t.Errorf("peek returned %v, want the pending bundle %s", again, b.GetId())
		}
	})
	t.Run("a bundle dequeued twice", func(t *testing.T) {
		dequeue(t, h, recipient, b.GetId())
		_, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: b.GetId()})
		wantCode(t, err, codes.NotFound)
	})
}

func testPeekNothingKeepsBundleID(t *testing.T, h *hub) {
	recipient := newID()
	id := newID()
	if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, id); b != nil {
		t.Fatalf("peek of an empty hub returned %v", b)
	}
	// Data of another group only: still nothing for TIME_SERIES.
	save(t, h, notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges"))
	if b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, id); b != nil {
		t.Fatalf("peek TIME_SERIES returned %v", b)
	}
	n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	save(t, h, n)
	b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, id)
	if b.GetId() != id || !slices.Equal(b.GetNotificationIds(), []string{n.GetId()}) {
		t.Fatalf("peek returned %v, want bundle %s with %s", b, id, n.GetId())
	}
}

func testFullSave(t *testing.T, h *hub) {
	recipient := newID()
	ns := make([]*messagehubv1.DataAvailable, 10_000)
	ids := make([]string, len(ns))
	contentType := strings.Repeat("C", 255)
	for i := range ns {
		ns[i] = &messagehubv1.DataAvailable{
			Id: newID(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
			ContentType: contentType, DocumentType: fmt.Sprintf("%0255d", i%7),
			SupportsBundling: true, Weight: 5,
		}
		ids[i] = ns[i].GetId()
	}
	req := &messagehubv1.SaveRequest{Notifications: ns}
	t.Logf("save request: %.1f MiB", float64(proto.Size(req))/(1<<20))
	resp, err := h.client.Save(ctxT(t), req)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if resp.GetSaved() != 10_000 {
		t.Fatalf("saved %d, want 10000", resp.GetSaved())
	}
	b := peek(t, h, recipient, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, "")
	// 10,000 × weight 5 = 50,000 ≤ 51,200: one bundle holds them all, in order.
	if !slices.Equal(b.GetNotificationIds(), ids) {
		t.Fatalf("bundle holds %d ids, want the 10000 saved in order", len(b.GetNotificationIds()))
	}
	if b.GetWeight() != 50_000 || b.GetContentType() != contentType || len(b.GetDocumentTypes()) != 7 {
		t.Errorf("bundle weight %d, %d document types; want 50000 and 7", b.GetWeight(), len(b.GetDocumentTypes()))
	}
	dequeue(t, h, recipient, b.GetId())
	wantNoBundle(t, h, recipient)
}
