package cosmos

import (
	"context"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// The settings document records what the layout of a database depends on
// (docs/decisions/0003-on-disk-format-policy.md): the format version of its
// documents and the id index's bucket count, with a migration to another
// count while one is under way (idlayout.go). An id is looked up in the
// bucket its hash modulo the count names, so an instance that counts
// otherwise than the one that stored it misses it and lets a duplicate in,
// without an error. Open compares the document with the configuration and
// refuses a database that differs, before anything is written to it,
// unless asked to migrate.

// formatVersion is the layout of the documents this build writes and reads.
// Version 2 keeps the drawers of a cabinet that fill a shelf on shelves of
// their own (docs.go); a build of version 1 would not see them, so it does
// not open a database of version 2.
const formatVersion = 2

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
	// NextIDBuckets is the count the id index is migrating to (0: none)
	// since IDMigrationSince (unix ms).
	NextIDBuckets    int   `json:"nextIdBuckets,omitempty"`
	IDMigrationSince int64 `json:"idMigrationSince,omitempty"`
	// ETag is the document's version as read (never written).
	ETag string `json:"_etag,omitempty"`
}

// checkSettings reads the database's settings, or writes them when it is
// empty, and refuses a database whose settings differ from this instance's
// unless Config.MigrateIDBuckets asks to migrate its id index to this
// instance's count. Instances that open an empty database at once agree:
// the first create wins, the others find it taken and compare with what it
// wrote.
func (s *Store) checkSettings(ctx context.Context) error {
	want := settingsDoc{ID: settingsID, PK: settingsPartition, T: typeSettings, Version: formatVersion, IDBuckets: s.cfg.IDBuckets}
	for attempt := 0; ; attempt++ {
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
		start, err := s.fitsIDBuckets(got)
		if err != nil {
			return err
		}
		if !start {
			s.idSettings.doc, s.idSettings.readAt = got, s.cfg.Now()
			return nil
		}
		migrating := got
		migrating.NextIDBuckets, migrating.IDMigrationSince, migrating.ETag = s.cfg.IDBuckets, s.cfg.Now().UnixMilli(), ""
		_, err = s.recipients.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(settingsPartition), settingsID, mustJSON(migrating),
			&azcosmos.ItemOptions{IfMatchEtag: etag(got.ETag)})
		switch {
		case err == nil:
			s.cfg.Logger.Warn("cosmos id index migration begun", "from_buckets", got.IDBuckets, "to_buckets", s.cfg.IDBuckets)
		case isStatus(err, http.StatusPreconditionFailed) && attempt < 3:
			// Another instance changed the settings meanwhile: look again.
		default:
			return fmt.Errorf("cosmos: database %s: begin the id index migration: %w", s.cfg.Database, err)
		}
	}
}

// fitsIDBuckets says whether this instance's id bucket count fits the
// database's settings (an error when not), or a migration to it is to
// begin.
func (s *Store) fitsIDBuckets(got settingsDoc) (start bool, err error) {
	mine := s.cfg.IDBuckets
	switch {
	case got.NextIDBuckets != 0 && (mine == got.IDBuckets || mine == got.NextIDBuckets):
		return false, nil // a migration is under way: join it
	case got.NextIDBuckets != 0:
		return false, fmt.Errorf("cosmos: database %s: its id index is migrating from %d to %d buckets, this instance is configured with %d (--cosmos-id-buckets): "+
			"start with --cosmos-id-buckets=%d until the migration ends",
			s.cfg.Database, got.IDBuckets, got.NextIDBuckets, mine, got.NextIDBuckets)
	case got.IDBuckets == mine:
		return false, nil
	case s.cfg.MigrateIDBuckets:
		return true, nil
	default:
		return false, fmt.Errorf("cosmos: database %s: the database's id index has %d buckets, this instance is configured with %d (--cosmos-id-buckets): "+
			"start with --cosmos-id-buckets=%d, or add --cosmos-id-buckets-migrate to move the index to %d buckets (docs/cosmos.md, \"The id index\")",
			s.cfg.Database, got.IDBuckets, mine, got.IDBuckets, mine)
	}
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

// holdsDocuments says whether any container a Save writes (recipients,
// drawers, ids, saves) holds a document: one query across partitions per
// container, stopped at the first document found.
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
