package cosmos

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Leases of document builds (issue 10): instances that peek the same bundle
// at once must ask its domain once. The first to create the bundle's lease
// document holds it until it expires or is released; another instance takes
// over an expired one by replacing it on its etag, so of two that try at once
// only one succeeds. Writes run on the primary and the read that decides runs
// there too (a batch), so no replica lag can make two holders.

// acquireBuild takes or renews the lease of the bundle's document build for
// holder, until d from now. It reports false when another holder's lease has
// not expired.
func (s *Store) acquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (bool, error) {
	pk := azcosmos.NewPartitionKeyString(recipient)
	now := s.cfg.Now()
	doc := leaseDoc{
		ID: leaseID(bundleID), PK: recipient, T: typeLease, Holder: holder, Expires: now.Add(d).UnixMilli(),
		// The document outlives its expiry a little, then goes by itself.
		TTL: int32((d+time.Minute)/time.Second) + 1,
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return false, err
	}
	resp, err := s.recipients.CreateItem(ctx, pk, raw, nil)
	if err == nil {
		s.noteItem(resp)
		return true, nil
	}
	if !isStatus(err, http.StatusConflict) {
		return false, err
	}
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, recipient, doc.ID, &cur)
	if err != nil || !found { // !found: released just now; the next try creates it
		return false, err
	}
	if cur.Holder != holder && cur.Expires > now.UnixMilli() {
		return false, nil
	}
	resp, err = s.recipients.ReplaceItem(ctx, pk, doc.ID, raw, &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
		return false, nil // another instance took it first
	}
	if err != nil {
		return false, err
	}
	s.noteItem(resp)
	return true, nil
}

// releaseBuild gives up holder's lease of the bundle's build; a lease that
// is gone or held by another is left alone.
func (s *Store) releaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, recipient, leaseID(bundleID), &cur)
	if err != nil || !found || cur.Holder != holder {
		return err
	}
	resp, err := s.recipients.DeleteItem(ctx, azcosmos.NewPartitionKeyString(recipient), cur.ID, &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
		return nil
	}
	if err == nil {
		s.noteItem(resp)
	}
	return err
}

func (s *Store) noteItem(resp azcosmos.ItemResponse) {
	if resp.SessionToken != nil {
		s.tokens.note(containerRecipients, *resp.SessionToken)
	}
}
