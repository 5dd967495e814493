package cosmos

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Leases: a document naming its holder and until when (leaseDoc). Document
// builds (issue 10) and the sweep (sweeplease.go) use them.
//
// Leases of document builds: instances that peek the same bundle
// at once must ask its domain once. The first to create the bundle's lease
// document holds it until it expires or is released; another instance takes
// over an expired one by replacing it on its etag, so of two that try at once
// only one succeeds. Writes run on the primary and the read that decides runs
// there too (a batch), so no replica lag can make two holders.

// acquireBuild takes or renews the lease of the bundle's document build for
// holder, until d from now. It reports false when another holder's lease has
// not expired.
func (s *Store) acquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (bool, error) {
	// The document outlives its expiry a little, then goes by itself.
	return s.takeLease(ctx, recipient, leaseID(bundleID), holder, d, int32((d+time.Minute)/time.Second)+1)
}

// releaseBuild gives up holder's lease of the bundle's build; a lease that
// is gone or held by another is left alone.
func (s *Store) releaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	return s.dropLease(ctx, recipient, leaseID(bundleID), holder)
}

// takeLease takes or renews the lease document id in partition pk for
// holder until d from now (ttl, when not 0, lets Cosmos DB remove the
// document by itself later). It reports false when another holder's lease
// has not expired, or another instance took it at the same moment: the
// first create wins, an expired lease is replaced on its etag.
func (s *Store) takeLease(ctx context.Context, pk, id, holder string, d time.Duration, ttl int32) (bool, error) {
	key := azcosmos.NewPartitionKeyString(pk)
	now := s.cfg.Now()
	raw, err := json.Marshal(leaseDoc{ID: id, PK: pk, T: typeLease, Holder: holder, Expires: now.Add(d).UnixMilli(), TTL: ttl})
	if err != nil {
		return false, err
	}
	resp, err := s.recipients.CreateItem(ctx, key, raw, nil)
	if err == nil {
		s.noteItem(resp)
		return true, nil
	}
	if !isStatus(err, http.StatusConflict) {
		return false, err
	}
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, pk, id, &cur)
	if err != nil || !found { // !found: released just now; the next try creates it
		return false, err
	}
	if cur.Holder != holder && cur.Expires > now.UnixMilli() {
		return false, nil
	}
	resp, err = s.recipients.ReplaceItem(ctx, key, id, raw, &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
		return false, nil // another instance took it first
	}
	if err != nil {
		return false, err
	}
	s.noteItem(resp)
	return true, nil
}

// dropLease deletes holder's lease document; one that is gone or held by
// another is left alone.
func (s *Store) dropLease(ctx context.Context, pk, id, holder string) error {
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, pk, id, &cur)
	if err != nil || !found || cur.Holder != holder {
		return err
	}
	resp, err := s.recipients.DeleteItem(ctx, azcosmos.NewPartitionKeyString(pk), id, &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
		return nil // taken over meanwhile
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
