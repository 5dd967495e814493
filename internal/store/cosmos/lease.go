package cosmos

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Leases: a document naming its holder and until when (leaseDoc). Document
// builds (internal/content) and the sweep (sweeplease.go) use them.
//
// Leases of document builds: instances that peek the same bundle
// at once must ask its domain once. The first to create the bundle's lease
// document holds it until it expires or is released; another instance takes
// over an expired one by replacing it on its etag, so of two that try at once
// only one succeeds. Writes run on the primary and the read that decides runs
// there too (a batch), so no replica lag can make two holders.

// buildLeaseOutlives is how long a build's lease document stays after its
// expiry before its ttl removes it.
const buildLeaseOutlives = time.Minute

// MaxBuildLease is the longest lease of a document build: its document's
// ttl, the lease plus buildLeaseOutlives and a second, is an int32 of
// seconds, and Cosmos DB refuses a document whose ttl is not 1..2^31-1 or
// -1. The configuration takes no longer one; a longer one's document gets
// this one's ttl.
const MaxBuildLease = (math.MaxInt32-1)*time.Second - buildLeaseOutlives

// acquireBuild takes or renews the lease of the bundle's document build for
// holder, until d from now. It returns the lease's holder and expiry after
// the attempt: holder itself when it holds the lease, another instance while
// that one's lease has not expired.
func (s *Store) acquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	// The document outlives its expiry a little, then goes by itself.
	ttl := int32((min(d, MaxBuildLease)+buildLeaseOutlives)/time.Second) + 1 //nolint:gosec // at most 2^31-1: MaxBuildLease
	cur, err := s.takeLease(ctx, recipient, leaseID(bundleID), holder, d, ttl)
	return cur.Holder, time.UnixMilli(cur.Expires), err
}

// releaseBuild gives up holder's lease of the bundle's build; a lease that
// is gone or held by another is left alone.
func (s *Store) releaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	return s.dropLease(ctx, recipient, leaseID(bundleID), holder)
}

// takeLease takes or renews the lease document id in partition pk for
// holder until d from now (ttl, when not 0, lets Cosmos DB remove the
// document by itself later). It returns the lease as it stands: holder's
// own when taken, or another holder's whose lease has not expired or who
// took it at the same moment (the first create wins, an expired lease is
// replaced on its etag). A lease released just now comes back with no
// holder; the next try creates it.
func (s *Store) takeLease(ctx context.Context, pk, id, holder string, d time.Duration, ttl int32) (leaseDoc, error) {
	key := azcosmos.NewPartitionKeyString(pk)
	now := s.cfg.Now()
	mine := leaseDoc{ID: id, PK: pk, T: typeLease, Holder: holder, Expires: now.Add(d).UnixMilli(), TTL: ttl}
	raw, err := json.Marshal(mine)
	if err != nil {
		return leaseDoc{}, err
	}
	resp, err := s.recipients.CreateItem(ctx, key, raw, nil)
	if err == nil {
		s.noteItem(resp)
		return mine, nil
	}
	if !isStatus(err, http.StatusConflict) {
		return leaseDoc{}, err
	}
	var cur leaseDoc
	if found, err := s.readOnPrimary(ctx, s.recipients, pk, id, &cur); err != nil || !found {
		return leaseDoc{}, err
	}
	if cur.Holder != holder && cur.Expires > now.UnixMilli() {
		return cur, nil
	}
	resp, err = s.recipients.ReplaceItem(ctx, key, id, raw, &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
		// Another instance took it first: say who.
		var winner leaseDoc
		_, err := s.readOnPrimary(ctx, s.recipients, pk, id, &winner)
		return winner, err
	}
	if err != nil {
		return leaseDoc{}, err
	}
	s.noteItem(resp)
	return mine, nil
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
