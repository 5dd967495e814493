package admin

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
)

// Remedies are the hub's calls that change a recipient's queue on an
// operator's word (internal/hub/remedy.go).
type Remedies interface {
	ReleaseBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error)
	AcknowledgeOnBehalf(ctx context.Context, recipient string, origin domain.Origin, contentType, upTo string) (hub.Acknowledged, error)
}

// MaxReasonLength bounds a remedy's reason, in characters.
const MaxReasonLength = 500

// CheckReason refuses a remedy without a reason (one of no visible
// character counts as none: spaces, control or format characters), with
// one over MaxReasonLength characters, or with one that is not UTF-8: the
// audit log records it as given. The admin command checks it too, before
// it sends anything.
func CheckReason(reason string) error {
	if err := checkUTF8("reason", reason); err != nil {
		return err
	}
	if !visible(reason) {
		return domain.Invalid("reason is required: say why (1..%d characters)", MaxReasonLength)
	}
	if n := utf8.RuneCountInString(reason); n > MaxReasonLength {
		return domain.Invalid("reason must be 1..%d characters, got %d", MaxReasonLength, n)
	}
	return nil
}

// visible reports whether s has a character that shows: a letter, mark,
// number, punctuation or symbol.
func visible(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsGraphic(r) && !unicode.IsSpace(r) })
}

// checkUTF8 refuses a string field that is not UTF-8. Protobuf's strings
// must be, but the hub's codec does not check them when it decodes a
// request; the Admin API's free-text fields are where it matters: their
// values are recorded or answered back, which needs them as given.
func checkUTF8(field, s string) error {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return domain.Invalid("%s must be UTF-8 text, but its byte %d (0x%02x) is not", field, i, s[i])
		}
		i += n
	}
	return nil
}

// ReleaseBundle gives up a pending bundle: the group's next Peek cuts
// afresh. Every field is checked before anything changes.
func (s *Service) ReleaseBundle(ctx context.Context, req *adminv1.ReleaseBundleRequest) (*adminv1.ReleaseBundleResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	bundleID, err := domain.ParseUUID("bundle_id", req.GetBundleId())
	if err != nil {
		return nil, err
	}
	if err := CheckReason(req.GetReason()); err != nil {
		return nil, err
	}
	rec, err := s.hub.ReleaseBundle(ctx, recipient, bundleID)
	if err != nil {
		return nil, err
	}
	return &adminv1.ReleaseBundleResponse{Released: pendingBundle(rec)}, nil
}

// AcknowledgeOnBehalf dequeues a cabinet's notifications up to and including
// the one named, as the actor's Dequeue would, at most
// hub.DefaultMaxAcknowledgeBundles bundles a call (more says whether to
// call again). Every field is checked before anything changes.
func (s *Service) AcknowledgeOnBehalf(ctx context.Context, req *adminv1.AcknowledgeOnBehalfRequest) (*adminv1.AcknowledgeOnBehalfResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	origin := domain.Origin(req.GetDomain())
	if !origin.Valid() {
		return nil, domain.Invalid("domain must be a defined domain, got %s", req.GetDomain())
	}
	if err := domain.ValidateContentType(req.GetContentType()); err != nil {
		return nil, err
	}
	upTo, err := domain.ParseUUID("up_to_notification_id", req.GetUpToNotificationId())
	if err != nil {
		return nil, err
	}
	if err := CheckReason(req.GetReason()); err != nil {
		return nil, err
	}
	done, err := s.hub.AcknowledgeOnBehalf(ctx, recipient, origin, req.GetContentType(), upTo)
	resp := &adminv1.AcknowledgeOnBehalfResponse{Notifications: done.Notifications, More: done.More}
	for _, b := range done.Bundles {
		resp.BundleIds = append(resp.BundleIds, b.ID)
	}
	if err != nil && len(resp.BundleIds) > 0 {
		// Cut short: the bundles dequeued stay dequeued, and are audited.
		return nil, &server.PartialAnswer{Err: err, Answer: resp}
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}
