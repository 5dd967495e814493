package cosmos

import (
	"context"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// The settings document records what the layout of a database depends on
// (docs/decisions/0003-on-disk-format-policy.md): the format version of its
// documents and the id index's bucket count. An id is looked up in the
// bucket its hash modulo the count names, so an instance that counts
// otherwise than the one that stored it misses it and lets a duplicate in,
// without an error. Open compares the document with the configuration and
// refuses a database that differs, before anything is written to it.

// formatVersion is the layout of the documents this build writes and reads.
// Until the layout is released, it changes in place and this stays 1.
const formatVersion = 1

// The settings document lives in a partition of its own in recipients: no
// recipient id starts with "_", and no query of the store's filters on t
// "settings".
const (
	settingsPartition = "_settings"
	settingsID        = "settings"
	typeSettings      = "settings"
)

// settingsDoc is read once per Open and by operators: its field names are
// spelled out.
type settingsDoc struct {
	ID        string `json:"id"`
	PK        string `json:"pk"`
	T         string `json:"t"`
	Version   int    `json:"version"`
	IDBuckets int    `json:"idBuckets"`
}

// checkSettings reads the database's settings, or writes them when it is
// empty, and refuses a database whose settings differ from this instance's.
// Instances that open an empty database at once agree: the first create
// wins, the others find it taken and compare with what it wrote.
func (s *Store) checkSettings(ctx context.Context) error {
	want := settingsDoc{ID: settingsID, PK: settingsPartition, T: typeSettings, Version: formatVersion, IDBuckets: s.cfg.IDBuckets}
	got, found, err := s.readSettings(ctx)
	if err == nil && !found {
		got, found, err = s.firstSettings(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("cosmos: database %s: settings: %w", s.cfg.Database, err)
	}
	if !found {
		return fmt.Errorf("cosmos: database %s holds documents but no settings document (id %q, pk %q in %s): "+
			"it was written by a build that kept none, and nothing tells its id index's bucket count; "+
			"start on a new database (--cosmos-database) or delete this one",
			s.cfg.Database, settingsID, settingsPartition, containerRecipients)
	}
	if got.Version != formatVersion {
		return fmt.Errorf("cosmos: database %s has format version %d, this build reads %d: "+
			"run a build that reads it, or start on a new database (--cosmos-database)",
			s.cfg.Database, got.Version, formatVersion)
	}
	if got.IDBuckets != want.IDBuckets {
		return fmt.Errorf("cosmos: database %s: the database's id index has %d buckets, this instance is configured with %d (--cosmos-id-buckets); "+
			"a database's bucket count cannot change: start with --cosmos-id-buckets=%d",
			s.cfg.Database, got.IDBuckets, want.IDBuckets, got.IDBuckets)
	}
	return nil
}

// readSettings reads the settings on the primary: a lagging replica's 404
// must not pass for a database without them.
func (s *Store) readSettings(ctx context.Context) (settingsDoc, bool, error) {
	var d settingsDoc
	found, err := s.readOnPrimary(ctx, s.recipients, settingsPartition, settingsID, &d)
	return d, found, err
}

// firstSettings writes want into a database that holds no documents. When
// the create finds them taken, or the database holds documents, the primary
// tells whether another instance's first Open wrote settings meanwhile
// (false: none, and the documents are from a build that wrote none).
func (s *Store) firstSettings(ctx context.Context, want settingsDoc) (settingsDoc, bool, error) {
	holds, err := s.holdsDocuments(ctx)
	if err != nil {
		return want, false, err
	}
	if !holds {
		_, err := s.recipients.CreateItem(ctx, azcosmos.NewPartitionKeyString(settingsPartition), mustJSON(want), nil)
		if err == nil {
			return want, true, nil
		}
		if !isStatus(err, http.StatusConflict) {
			return want, false, err
		}
	}
	return s.readSettings(ctx)
}

// holdsDocuments says whether any container holds a document: one query
// across partitions per container, stopped at the first document found.
func (s *Store) holdsDocuments(ctx context.Context) (bool, error) {
	for _, c := range []*azcosmos.ContainerClient{s.recipients, s.drawers, s.ids, s.saves} {
		pager := c.NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 1})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return false, err
			}
			if len(page.Items) > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}
