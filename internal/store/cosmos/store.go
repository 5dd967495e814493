// Package cosmos is the Store for Azure Cosmos DB, through the official
// azcosmos SDK. Several MessageHub instances may share one database: every
// write is conditional (etags) or a create, saves reserve sequence numbers
// on the recipient's head and commit through a record of their own, and the
// watermark only passes finished saves. See docs/cosmos.md.
package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Config says where the store is and how it behaves.
type Config struct {
	Endpoint  string
	Key       string // empty: Azure AD through azidentity's default credential chain
	Database  string // default "messagehub"
	Provision bool   // create the database and containers when missing
	// Throughput of each container created by provisioning (default
	// DefaultThroughput).
	Throughput Throughput
	// Retention is the time-to-live of dequeued bundles (default 7 days).
	Retention time.Duration
	// Lease is how long a save may hold a reservation before others roll it
	// back (default DefaultLease), or twice what the caller's deadline
	// leaves when that is longer. A save decides within half of it.
	Lease time.Duration
	// IDBuckets spreads the id index over this many partitions (1..256,
	// default 4): every save writes and queries each bucket its ids fall
	// in, so fewer buckets are cheaper per save; each partition serves at
	// most 10,000 RU/s and 20 GB (docs/cosmos.md sizes it). The database's
	// settings record it when it is first opened, and Open refuses another
	// count (settings.go) unless MigrateIDBuckets is set.
	IDBuckets int
	// MigrateIDBuckets lets Open begin moving a database's id index to
	// IDBuckets when it has another count (idlayout.go).
	MigrateIDBuckets bool
	// Transport sends the SDK's requests (default: a pooled HTTP client).
	Transport policy.Transporter
	// OnRequest, when set, is told about every request (for metrics).
	OnRequest RequestObserver
	Logger    *slog.Logger
	Now       func() time.Time
}

// DefaultIDBuckets is the id partitions of a store whose Config says none:
// with four, a save of 1,000 costs 0.48 RU per notification with its peek
// and dequeue on the test server's model (16: 0.58), and the id index still
// takes 40,000 RU/s and 80 GB. See docs/cosmos.md, "Cost".
const DefaultIDBuckets = 4

// DefaultLease is a reservation's lease when Config says none. A save
// commits or fails within half of it (commitSaves), 30 s: as long as the
// hub lets a group commit take unless a caller allows it more. The other half is
// the margin for requests still in flight when the save gives up, the
// transport's per-attempt cap (defaultRoundTrip) and the instances'
// clocks, which compare the lease's end: another instance settles a
// reservation only once the save can no longer be deciding.
const DefaultLease = 60 * time.Second

// Store is the Cosmos DB store.Store.
type Store struct {
	cfg        Config
	client     *azcosmos.Client
	meter      *Meter
	recipients *azcosmos.ContainerClient
	drawers    *azcosmos.ContainerClient
	ids        *azcosmos.ContainerClient
	saves      *azcosmos.ContainerClient
	audit      *azcosmos.ContainerClient
	auditFloor auditFloor // see PruneAudit

	tokens *sessionTokens
	// anchored: reads of a recipient's state first read its head on the
	// primary (Session consistency); stronger levels read a quorum anyway.
	anchored bool
	released idReleases // retention's knowledge of id documents per save
	// noticesAt is where the last look of each notices query stopped
	// (notices.go).
	noticesAt noticeResume
	// finalizeFor bounds the retries of a committed save's finalize.
	finalizeFor time.Duration
	// idSettings: the id index's bucket counts (idlayout.go).
	idSettings idSettings
	// bells wakes other instances' waiting peeks (bells.go).
	bells *bells
	// heads: the heads recent loads read, for the saves planned on them.
	heads knownHeads
	// catalogs are the entries that go with the heads kept, for a save's
	// plan (knownCatalogs).
	catalogs knownCatalogs
	// pages are the pages this instance wrote last, which a drawer read
	// of their positions reads by id (writtenPages).
	pages writtenPages
	// drains: recipients this instance saw drained, by head version.
	drains drains
	// held: the recipients whose head holds reservations, as the backlog
	// figures last read it (backlog.go).
	held heldHeads
	// retainedBudget bounds one recipient's retained dequeued bundles, in
	// bytes (retention.go); 0: defaultRetainedBudget.
	retainedBudget int64
}

var _ store.Store = (*Store)(nil)

// Open connects to the account and, when cfg.Provision is set, creates what
// is missing. It refuses a database whose containers, account or settings
// do not fit this build and cfg, and writes the settings of one that has
// none and holds no documents yet.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Database == "" {
		cfg.Database = "messagehub"
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Retention > MaxRetention {
		return nil, fmt.Errorf("cosmos: a retention of at most %s (a ttl of 2^31-1 seconds with its margin), got %s", MaxRetention, cfg.Retention)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.IDBuckets <= 0 {
		cfg.IDBuckets = DefaultIDBuckets
	}
	if cfg.IDBuckets > 256 {
		return nil, fmt.Errorf("cosmos: at most 256 id buckets, got %d", cfg.IDBuckets)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Transport == nil {
		cfg.Transport = defaultClient()
	}
	// The meter sits below the retries, so that it counts every attempt.
	account := &accountReader{next: cfg.Transport}
	meter := NewMeter(account, cfg.OnRequest)
	opts := &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: prioritized{retrying{next: meter, attempts: 4, backoff: 50 * time.Millisecond}},
		// 429s are retried after x-ms-retry-after-ms, 408 and 5xx with
		// backoff, all within the call's deadline: a throttled partition may
		// ask for seconds while it repays its debt, so the cap is a minute
		// and the tries many, and the caller's deadline decides when to give
		// up. Every write here is conditional or a create, so a retried
		// write can only turn into a conflict, never into a second effect.
		Retry: policy.RetryOptions{MaxRetries: 1000, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: time.Minute},
	}}
	var client *azcosmos.Client
	var err error
	if cfg.Key != "" {
		cred, kerr := azcosmos.NewKeyCredential(cfg.Key)
		if kerr != nil {
			return nil, fmt.Errorf("cosmos key: %w", kerr)
		}
		client, err = azcosmos.NewClientWithKey(cfg.Endpoint, cred, opts)
	} else {
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, fmt.Errorf("cosmos: no key and no Azure AD credential: %w", cerr)
		}
		client, err = azcosmos.NewClient(cfg.Endpoint, cred, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("cosmos client: %w", err)
	}
	// A read of the database first: the SDK reads the account's properties
	// before its first request, and an account the store refuses is
	// refused before provisioning creates anything on it (a database and
	// containers with throughput, billed). Provisioning creates a database
	// that is missing; any other failure (a refused key, an endpoint that
	// does not answer) is the error to report, as the account properties
	// it left unread would only say that the consistency level is unknown.
	db, err := client.NewDatabase(cfg.Database)
	if err != nil {
		return nil, err
	}
	_, err = db.Read(ctx, nil)
	dbExists := err == nil
	switch {
	case err == nil, cfg.Provision && isStatus(err, http.StatusNotFound):
	case isStatus(err, http.StatusNotFound):
		return nil, fmt.Errorf("cosmos: database %s does not exist (run with --cosmos-provision, or create it as docs/cosmos.md says)", cfg.Database)
	default:
		return nil, fmt.Errorf("cosmos: database %s: %w", cfg.Database, err)
	}
	level := account.consistency()
	if err := checkConsistency(level); err != nil {
		return nil, err
	}
	if err := account.checkWriteRegions(); err != nil {
		return nil, err
	}
	var create *Throughput
	if cfg.Provision {
		if err := cfg.Throughput.Validate(); err != nil {
			return nil, err
		}
		if !dbExists {
			if err := createDatabase(ctx, client, cfg.Database); err != nil {
				return nil, err
			}
		}
		create = &cfg.Throughput
	}
	if err := checkContainers(ctx, client, cfg.Database, create, cfg.Logger); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, client: client, meter: meter, tokens: newSessionTokens(), anchored: strings.EqualFold(level, "Session"),
		finalizeFor: finalizeFor}
	for _, c := range []struct {
		name string
		dst  **azcosmos.ContainerClient
	}{{containerRecipients, &s.recipients}, {containerDrawers, &s.drawers}, {containerIDs, &s.ids}, {containerSaves, &s.saves}, {containerAudit, &s.audit}} {
		if *c.dst, err = client.NewContainer(cfg.Database, c.name); err != nil {
			return nil, err
		}
	}
	if err := s.checkSettings(ctx); err != nil {
		return nil, err
	}
	if s.bells, err = newBells(client, cfg.Database); err != nil {
		return nil, err
	}
	return s, nil
}

// defaultClient sends the store's requests when Config names no transport.
// It keeps the timeouts of the client azcosmos v1.5.0 uses by default
// (cosmos_default_http_client.go in the module cache, which mirrors azcore's
// default transport, sdk/internal/transport/transport.go): connections are
// dialled within 5 s, TLS handshakes take at most 10 s, and no attempt lasts
// more than 65 s, the gateway's own budget of about 60 s and a margin, so a
// request that never answers ends and the retries above decide. It pools
// more connections per host than either, as every instance talks to one
// endpoint.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.IdleConnTimeout = 90 * time.Second
	t.ExpectContinueTimeout = time.Second
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 256
	// HTTP/2 connections are pinged when idle and dropped when the ping
	// goes unanswered, as azcosmos configures them.
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 2 * time.Second, PingTimeout: time.Second}
	return &http.Client{Transport: t, Timeout: defaultRoundTrip}
}

// defaultRoundTrip caps one attempt of a request (azcosmos's
// defaultHTTPRoundTripTimeout).
const defaultRoundTrip = 65 * time.Second

// Meter counts this store's requests.
func (s *Store) Meter() *Meter { return s.meter }

// Close releases the client's connections.
func (s *Store) Close() error {
	s.client.Close()
	return nil
}

// errNoBackup is Backup's answer: the account's data is backed up by
// Cosmos DB itself (docs/cosmos.md).
var errNoBackup = fmt.Errorf("%w: a Cosmos DB store is not copied by the hub; it is covered by the account's "+
	"continuous backup (point-in-time restore into a new account, see docs/cosmos.md)", domain.ErrNotSupported)

// Backup implements store.Store: the account's continuous backup covers
// the data, so the hub copies nothing.
func (s *Store) Backup(context.Context, string) error { return errNoBackup }

// LoadRecipient reads the head on the primary and then the catalog,
// cursors and pending bundles in one query of the recipient's partition; a
// head with expired reservations is repaired first, and HeldFor says when
// the first of those left ends. With store.MayBeIdle a
// head that says idle (headDoc.idle), or no head at all, is the whole
// answer: one request. With store.MayLag the primary read is left out and
// the query reads the head too, as fresh as this instance's own writes.
// With store.OwnBundle of a bundle this instance created, nothing is read
// (drains.own).
func (s *Store) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	if id := store.OwnBundleOf(opts); id != "" {
		if st, ok := s.drains.own(recipient, id); ok {
			return st, nil
		}
	}
	how := loadHow{
		mayBeIdle:   slices.Contains(opts, store.MayBeIdle),
		mayLag:      slices.Contains(opts, store.MayLag),
		catalogOnly: slices.Contains(opts, store.CatalogOnly),
	}
	for attempt := 0; ; attempt++ {
		st, head, err := s.loadRecipient(ctx, recipient, how)
		if err != nil || attempt > 0 || !s.hasExpired(head) {
			st.HeldFor = s.heldFor(head)
			return st, storeError(err)
		}
		if err := s.resolveExpired(ctx, recipient); err != nil && !errors.Is(err, store.ErrConflict) {
			return st, storeError(err)
		}
	}
}

// recipientTypes are the documents a load queries; the head too when it
// was not read on the primary first. A save's load (store.CatalogOnly)
// leaves the cursors and pending bundles out: a document less to pay for
// per cabinet and per bundle.
const (
	recipientTypes         = "SELECT * FROM c WHERE c.t IN ('entry', 'shelf', 'cursor', 'pending')"
	recipientTypesWithHead = "SELECT * FROM c WHERE c.t IN ('head', 'entry', 'shelf', 'cursor', 'pending')"
	catalogTypes           = "SELECT * FROM c WHERE c.t IN ('entry', 'shelf')"
	catalogTypesWithHead   = "SELECT * FROM c WHERE c.t IN ('head', 'entry', 'shelf')"
)

// loadHow is what a load's options allow (store.LoadOption).
type loadHow struct{ mayBeIdle, mayLag, catalogOnly bool }

func (s *Store) loadRecipient(ctx context.Context, recipient string, how loadHow) (store.RecipientState, headDoc, error) {
	var st store.RecipientState
	var head headDoc
	mayBeIdle, mayLag := how.mayBeIdle, how.mayLag
	// The head is read on the primary to anchor the query (Session
	// consistency, see anchor) and whenever an idle answer may do.
	primary := mayBeIdle || s.anchored && !mayLag
	sql, sqlWithoutHead := recipientTypesWithHead, recipientTypes
	if how.catalogOnly {
		sql, sqlWithoutHead = catalogTypesWithHead, catalogTypes
	}
	if primary {
		found, err := s.anchor(ctx, recipient, &head)
		if err != nil {
			return st, head, err
		}
		st.Head = toHead(head)
		if mayBeIdle && (!found || head.idle() || s.drains.drained(recipient, head.ETag)) {
			st.Idle = true
			return st, head, nil
		}
		// The query need not load the head again: one document less to
		// pay for.
		sql = sqlWithoutHead
	}
	if how.catalogOnly && mayLag && !primary {
		if known, ok := s.heads.lastDoc(recipient); ok {
			if entries, ok := s.catalogs.at(recipient, known.ETag); ok {
				// What this instance last read or wrote of the catalog:
				// as fresh as a lagging query, and the save's writes are
				// conditional on it (knownCatalogs).
				s.tokens.note(containerDrawers, known.DrawersToken)
				return store.RecipientState{Head: toHead(known), Entries: entries}, known, nil
			}
		}
	}
	var cat catalogDocs
	// A query is answered in pages, each from a replica as of its own
	// moment: a document deleted and created again in between (an entry or
	// cursor retention took out of the catalog, created again by a save or
	// a bundle) comes twice, as of both moments, and the state would mix
	// the two (a bundle of the new entry read back through the old one's
	// drawers). Such a load is a stale read: the caller reads again.
	seen := map[string]bool{}
	pages := 0
	err := queryPaged(ctx, s.recipients, recipient, sql, &azcosmos.QueryOptions{SessionToken: s.tokens.get(containerRecipients)}, &pages,
		func(raw []byte) error {
			var probe struct{ T, ID string }
			if err := json.Unmarshal(raw, &probe); err != nil {
				return err
			}
			if seen[probe.ID] {
				return fmt.Errorf("%w: the load of recipient %s read document %s twice, from pages of two moments", store.ErrConflict, recipient, probe.ID)
			}
			seen[probe.ID] = true
			switch probe.T {
			case typeHead:
				if err := json.Unmarshal(raw, &head); err != nil {
					return err
				}
				st.Head = toHead(head)
				// The pages below this watermark are read with their token.
				s.tokens.note(containerDrawers, head.DrawersToken)
			case typeEntry, typeShelf:
				return cat.add(probe.T, raw)
			case typeCursor:
				var d cursorDoc
				if err := json.Unmarshal(raw, &d); err != nil {
					return err
				}
				st.Cursors = append(st.Cursors, toCursor(d))
			case typePending:
				var d bundleDoc
				if err := json.Unmarshal(raw, &d); err != nil {
					return err
				}
				st.Pending = append(st.Pending, toBundle(d))
			}
			return nil
		})
	st.Entries = cat.catalog()
	if err == nil && pages > 1 && !how.catalogOnly {
		err = pendingAtCursors(recipient, st)
	}
	if err == nil && pages > 1 && !mayLag && !how.catalogOnly {
		err = s.checkCursorless(ctx, recipient, st)
	}
	if err == nil && head.ETag != "" {
		s.heads.keep(recipient, head)
	}
	if err == nil && pages <= 1 && len(cat.shelved) == 0 {
		s.catalogs.keep(recipient, head.ETag, st.Entries)
	} else {
		s.catalogs.forget(recipient)
	}
	if err == nil && mayBeIdle && !how.catalogOnly {
		s.drains.loaded(recipient, head.ETag, st)
	}
	return st, head, err
}

// checkCursorless reads on the primary the entries of a load answered in
// several pages that came without a cursor, and finds each as loaded. A
// cabinet without a cursor is acknowledged up to position 0, and a bundle
// cut from it creates its cursor, which nothing stops when the cursor is
// gone: retention deletes a drained entry and its cursor in one batch, and
// a load whose page of the entry came before that batch and whose page of
// the cursor after it would cut the drained notifications again (from the
// drawer kept for their retained bundles), then acknowledge the positions
// of the entry a save creates anew. Such a batch came before the load's
// last page, so before this read: an entry gone or changed is a stale
// read, which the caller reads again.
func (s *Store) checkCursorless(ctx context.Context, recipient string, st store.RecipientState) error {
	var check []catalog.Entry
	for _, e := range st.Entries {
		if !slices.ContainsFunc(st.Cursors, func(c catalog.Cursor) bool { return c.Key() == e.Key() }) {
			check = append(check, e)
		}
	}
	for chunk := range slices.Chunk(check, maxBatchOps) {
		b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
		for _, e := range chunk {
			b.ReadItem(entryID(e.Key()), nil)
		}
		resp, err := s.recipients.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return err
		}
		s.tokens.note(containerRecipients, resp.SessionToken)
		if !resp.Success || len(resp.OperationResults) != len(chunk) {
			return fmt.Errorf("%w: the load of recipient %s read an entry its later pages show gone", store.ErrConflict, recipient)
		}
		for i, op := range resp.OperationResults {
			if op.StatusCode >= 300 || string(op.ETag) != chunk[i].Version {
				return fmt.Errorf("%w: the load of recipient %s read entry %s as of before a change its later pages show",
					store.ErrConflict, recipient, entryID(chunk[i].Key()))
			}
		}
	}
	return nil
}

// pendingAtCursors finds each pending bundle of a load answered in several
// pages at its cabinet's cursor, as it is while the bundle is pending
// (only its dequeue moves the cursor). A cabinet's cursor is created in the
// batch of its first bundle, after it, so a page may hold the bundle
// pending and a later one the cursor another instance's dequeue of it moved
// past it meanwhile: answered from that state, a Peek would return the
// dequeued bundle again. Such a load is a stale read: the caller reads
// again.
func pendingAtCursors(recipient string, st store.RecipientState) error {
	for _, rec := range st.Pending {
		k := catalog.Key{Origin: rec.Origin, ContentType: rec.ContentType}
		if c := cursorIn(st, k); c.Acked != rec.Start {
			return fmt.Errorf("%w: the load of recipient %s read bundle %s pending at position %d and its cabinet acknowledged up to %d, from pages of two moments",
				store.ErrConflict, recipient, rec.ID, rec.Start, c.Acked)
		}
	}
	return nil
}

// queryPaged is queryWith that counts the pages of the answer into pages.
func queryPaged(ctx context.Context, c *azcosmos.ContainerClient, pk, sql string, opts *azcosmos.QueryOptions, pages *int, fn func([]byte) error) error {
	pager := c.NewQueryItemsPager(sql, azcosmos.NewPartitionKeyString(pk), opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		*pages++
		for _, raw := range page.Items {
			if err := fn(raw); err != nil {
				return err
			}
		}
	}
	return nil
}

func toHead(d headDoc) store.Head {
	return store.Head{NextSeq: d.Next, Watermark: d.Watermark, Version: d.ETag}
}

// anchor reads the recipient's head on the primary (a transactional batch
// runs there) into head and keeps the answer's session token, so that the
// query of the recipient's state that follows sees every write that
// succeeded before it, whichever instance made it; found is false when
// there is no head (a batch on the primary answers that for certain). The
// state's head is this one, not the query's: the query's documents are
// then at least as new as the head, so what the head's watermark shows was
// in the catalog it read, and a mark of idleness (MarkIdle) made on this
// head's version proves that nothing changed the head after the documents
// were read. The pages below the head's watermark are read with its
// drawers token.
func (s *Store) anchor(ctx context.Context, recipient string, head *headDoc) (found bool, err error) {
	found, err = s.readOnPrimary(ctx, s.recipients, recipient, headID, head)
	if found && err == nil {
		s.tokens.note(containerDrawers, head.DrawersToken)
	}
	return found, err
}

// MarkIdle implements store.Store: it patches the head's IdleAt to its Next,
// on the etag the caller loaded, so that a Peek's load (store.MayBeIdle) is
// answered by the primary read of the head alone until a save reserves
// sequence numbers (headDoc.idle). A lost answer's resend meets its own
// mark (412) and a refusal leaves the head as it was: both are only a
// missed saving, never a hidden notification.
func (s *Store) MarkIdle(ctx context.Context, recipient string, head store.Head) error {
	if head.Version == "" || head.NextSeq <= 0 || head.Watermark != head.NextSeq-1 {
		return nil
	}
	var ops azcosmos.PatchOperations
	ops.AppendSet("/idle", head.NextSeq)
	resp, err := s.recipients.PatchItem(ctx, azcosmos.NewPartitionKeyString(recipient), headID, ops,
		&azcosmos.ItemOptions{IfMatchEtag: etag(head.Version)})
	if err == nil && resp.SessionToken != nil {
		s.tokens.note(containerRecipients, *resp.SessionToken)
	}
	return storeError(err)
}

// readDrawer queries the drawer's pages overlapping [from, to), projected
// to the items asked for: a bundle of one reads one item, not a page of a
// thousand (a query is charged by the bytes it returns).
func (s *Store) readDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	return s.readDrawerWith(ctx, s.tokens.get(containerDrawers), drawerID, from, to, limit)
}

// readDrawerLatest is readDrawer with the token the primary of the
// drawer's partition answers now (primaryToken): no replica behind a page
// written there answers the query. It costs one request more, so the hub
// asks for it only when a read from a cabinet's first unacknowledged
// position missed it and found a position above the watermark after it.
func (s *Store) readDrawerLatest(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	token, err := s.primaryToken(ctx, s.drawers, drawerID)
	if err != nil {
		return nil, err
	}
	if own := s.tokens.get(containerDrawers); own != nil {
		token = mergeTokens(token, *own)
	}
	return s.readDrawerWith(ctx, &token, drawerID, from, to, limit)
}

// readDrawerWith is readDrawer's query, sent with token.
func (s *Store) readDrawerWith(ctx context.Context, token *string, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	// Positions are consecutive within pages, so limit items lie below
	// from+limit.
	to = min(to, from+int64(limit))
	if items, ok := s.readOwnPage(ctx, token, drawerID, from, to); ok {
		return items, nil
	}
	var items []drawer.Item
	opts := &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{{Name: "@from", Value: from}, {Name: "@to", Value: to}},
		SessionToken:    token,
	}
	err := queryWith(ctx, s.drawers, drawerID, readDrawerSQL, opts,
		func(raw []byte) error {
			var p pageDoc
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			got, err := p.items(max(from-p.Start, 0))
			if err != nil {
				return fmt.Errorf("drawer %s: %w", drawerID, err)
			}
			for _, it := range got {
				if it.Pos >= from && it.Pos < to {
					items = append(items, it)
				}
			}
			return nil
		})
	return items, err
}

// readDrawerSQL slices each page's items to [@from, @to): the slice starts
// at @from - s in the first page and at 0 in the others.
const readDrawerSQL = "SELECT c.s, c.q, c.w, c.b, c.t, " +
	"ARRAY_SLICE(c.x, (@from > c.s ? @from - c.s : 0), @to - (@from > c.s ? @from : c.s)) AS x " +
	"FROM c WHERE c.e > @from AND c.s < @to ORDER BY c.s"

// BundleExists reads the bundle's document.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	_, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), bundleDocID(bundleID), "")
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, storeError(err)
}

// CreateBundle creates the bundle and its group's slot, and pins the cursor,
// in one transactional batch.
func (s *Store) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	if err := batchCreate(&b, slotDoc{ID: slotID(rec.Group), PK: recipient, T: typeSlot, Bundle: rec.ID}); err != nil {
		return err
	}
	if err := batchCreate(&b, fromBundle(recipient, rec)); err != nil {
		return err
	}
	// Rewriting the cursor unchanged, on its etag, makes the batch fail if a
	// dequeue moved it since the bundle was cut.
	if err := batchWrite(&b, fromCursor(recipient, cursor), cursor.Version); err != nil {
		return err
	}
	resp, err := s.runBatch(ctx, s.recipients, b)
	if err == nil && len(resp.OperationResults) == 3 {
		rec.Version = string(resp.OperationResults[1].ETag)
		lastHead, _ := s.heads.last(recipient)
		s.drains.created(recipient, rec, cursor, string(resp.OperationResults[2].ETag), lastHead)
	}
	return err
}

// Acknowledge deletes the group's slot, marks the bundle dequeued (to expire
// after the retention), writes its notice when it has one and moves the
// cursor, in one transactional batch.
func (s *Store) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	b.DeleteItem(slotID(rec.Group), nil)
	if rec.Notice {
		// The notice of the dequeue commits with it or not at all (notices.go).
		// A notice of an earlier bundle of this id may outlive that bundle's
		// record (the retained-bytes bound removes records before the
		// notices' ttl), and the id is free again: that notice has another
		// dequeue time in its id, so both stay until each is delivered.
		raw, err := json.Marshal(s.notice(recipient, rec))
		if err != nil {
			return err
		}
		b.CreateItem(raw, nil)
	}
	doc := fromBundle(recipient, rec)
	if len(rec.Drawers) == 0 {
		doc.TTL = ptr(dequeuedTTL(s.cfg.Retention))
	} // else only the sweeper removes it: it alone knows when its drawers go, which no entry names
	if err := batchWrite(&b, doc, rec.Version); err != nil {
		return err
	}
	if err := batchWrite(&b, fromCursor(recipient, cursor), cursor.Version); err != nil {
		return err
	}
	err := s.execute(ctx, s.recipients, b)
	if err != nil {
		// A refusal may be a replay of our own batch after a lost answer,
		// and a failure (408, 503, a cut connection) may be the loss of an
		// answer past the transport's resends: the primary says whether the
		// bundle is dequeued, at the moment we dequeued it. A dequeue that
		// applied is answered as done, so that an acknowledgement on the
		// actor's behalf names (and the audit log records) the bundle it
		// dequeued; answered as failed, it would name none, and its next
		// try would find nothing to do, which records nothing.
		var now bundleDoc
		ours, rerr := s.ownReplay(ctx, s.recipients, recipient, doc.ID, &now, func() bool {
			return now.T == typeDequeued && now.DequeuedAt == doc.DequeuedAt
		})
		switch {
		case ours:
			err = nil
		case rerr != nil && errors.Is(err, store.ErrConflict):
			err = rerr
		}
	}
	s.drains.ended(recipient, rec.ID, err == nil)
	return err
}

// ReleaseBundle deletes the group's slot and marks the bundle released (to
// expire after the retention, like a dequeued one), in one transactional
// batch on the bundle's etag; the cursor is not touched.
func (s *Store) ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error {
	if rec.Version == "" {
		return fmt.Errorf("%w: bundle %s has no version to release it at", store.ErrConflict, rec.ID)
	}
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	b.DeleteItem(slotID(rec.Group), nil)
	doc := fromBundle(recipient, rec)
	doc.TTL = ptr(int32(s.cfg.Retention / time.Second))
	if err := batchWrite(&b, doc, rec.Version); err != nil {
		return err
	}
	err := s.execute(ctx, s.recipients, b)
	s.drains.ended(recipient, rec.ID, false)
	if err != nil {
		// A refusal may be a replay of our own batch after a lost answer,
		// and a failure (408, 503, a cut connection) may be the loss of an
		// answer past the transport's resends: the primary says whether the
		// bundle is released, at the moment we released it. A release that
		// applied is answered as done, so that the operator's remedy is
		// recorded; answered as failed, it would be found released by the
		// operator's next try, and recorded by neither.
		var now bundleDoc
		ours, rerr := s.ownReplay(ctx, s.recipients, recipient, doc.ID, &now, func() bool {
			return now.T == typeReleased && now.ReleasedAt == doc.ReleasedAt
		})
		switch {
		case ours:
			return nil
		case rerr != nil && errors.Is(err, store.ErrConflict):
			return rerr
		}
	}
	return err
}

// Recipients lists recipients from the registry partition.
func (s *Store) Recipients(ctx context.Context, fn func(recipient string) error) error {
	var recipients []string
	err := s.query(ctx, s.recipients, registryPartition, "SELECT c.id FROM c", nil, func(raw []byte) error {
		var d struct{ ID string }
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		recipients = append(recipients, d.ID)
		return nil
	})
	if err != nil {
		return storeError(err)
	}
	for _, r := range recipients {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DequeuedBundles lists the recipient's dequeued and released bundles not
// yet expired.
func (s *Store) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	var out []bundle.Record
	err := s.query(ctx, s.recipients, recipient, "SELECT * FROM c WHERE c.t IN ('dequeued', 'released')", nil, func(raw []byte) error {
		var d bundleDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		out = append(out, toBundle(d))
		return nil
	})
	return out, storeError(err)
}

// applySweep deletes the freed drawers first (their id documents, then
// their pages below the end the sweep read), then writes the catalog's
// changes and deletes the expired bundles, in one transactional batch per
// hundred operations. Nothing names a drawer's pages but the catalog and
// the bundles, so deleting them last would leave them to nothing should
// the sweep stop in between; deleted first, a sweep that stops leaves the
// catalog naming acknowledged positions whose pages are gone, which no
// reader reads (a Peek starts at the cursor), and the next sweep of the
// recipient, on any instance, finds the same drawers freed and finishes.
// A save that took positions in a freed drawer meanwhile wrote its pages
// at or beyond that end, so they stay, and its entry's change makes the
// batch fail: the drawer stays in the catalog.
func (s *Store) applySweep(ctx context.Context, sw store.Sweep) error {
	if len(sw.Entries) > 0 || len(sw.DeleteEntries) > 0 {
		s.catalogs.forget(sw.Recipient)
	}
	for _, d := range sw.Drawers {
		below, named := sw.DrawerEnds[d]
		if !named {
			below = math.MaxInt64 // out of the catalog already: nothing appends to it
		}
		if err := s.deleteDrawer(ctx, d, below); err != nil {
			return err
		}
	}
	return s.sweepCatalog(ctx, sw)
}

// sweepCatalog writes the sweep's entry replaces and deletes and the
// expired bundles' deletes in batches within Cosmos DB's limits (a
// recipient may have thousands of cabinets and bundles due).
// An entry and its cursor are deleted in one batch: a cursor left alone
// would count a new entry's first positions as acknowledged. Cabinets are
// independent, so a batch that fails leaves the others' done, for the next
// sweep to finish.
func (s *Store) sweepCatalog(ctx context.Context, sw store.Sweep) error {
	type unit struct {
		docs  []string // the documents its operations write, in order
		bytes int
		add   func(*azcosmos.TransactionalBatch) error
	}
	var units []unit
	// Drawers that leave an entry for bundles that still read them are
	// recorded in the batch that takes them out of it, so that no drawer is
	// left to nothing, and none is deleted while an entry still names it.
	kept := map[catalog.Key]store.Kept{}
	for _, k := range sw.Keep {
		kept[k.Cabinet] = k
	}
	keptRecord := func(k store.Kept, drawers []string) unit {
		doc := keptDoc{ID: keptID(uuid.NewString()), PK: sw.Recipient, T: typeKept, Until: k.Until.UnixMicro(), Drawers: drawers}
		raw := mustJSON(doc)
		return unit{[]string{doc.ID}, len(raw), func(b *azcosmos.TransactionalBatch) error { b.CreateItem(raw, nil); return nil }}
	}
	withKept := func(key catalog.Key, u unit) unit {
		k, ok := kept[key]
		if !ok || len(k.Drawers) == 0 {
			return u
		}
		r := keptRecord(k, k.Drawers)
		return unit{slices.Concat(u.docs, r.docs), u.bytes + r.bytes, func(b *azcosmos.TransactionalBatch) error {
			if err := u.add(b); err != nil {
				return err
			}
			return r.add(b)
		}}
	}
	stored, err := s.storedShelves(ctx, sw.Recipient,
		slices.ContainsFunc(sw.Entries, mayBeShelved) || slices.ContainsFunc(sw.DeleteEntries, mayBeShelved))
	if err != nil {
		return err
	}
	// ahead writes the shelf changes of one cabinet that its own batch
	// cannot hold (more than a hundred shelves: a cabinet of thousands of
	// drawers) in batches before it, each rewriting the entry document
	// as the cabinet's batch writes it, on the etag the last one left, with
	// a kept record of the kept drawers it takes out of the catalog (first
	// leave the first batch's, besides its shelves'). The catalog loads as
	// the entry's drawers and those of the shelves still stored, so each
	// batch leaves it naming fewer of the drawers that leave, and a save to
	// the cabinet meanwhile fails the next; the cabinet's batch writes the
	// rest, and the kept record of the rest (a cabinet's last drawer, which
	// saves fill, is only kept once its entry is gone).
	ahead := func(key catalog.Key, doc entryDoc, version string, ops []shelfOp, first []string) (string, []shelfOp, error) {
		for len(ops) > maxShelfOps {
			b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(sw.Recipient))
			if err := batchWrite(&b, doc, version); err != nil {
				return "", nil, err
			}
			leaving := first
			first = nil
			for _, op := range ops[:maxShelfOps] {
				op.add(&b)
				leaving = append(leaving, op.leaves...)
			}
			if k, ok := kept[key]; ok {
				now := slices.DeleteFunc(slices.Clone(k.Drawers), func(d string) bool { return !slices.Contains(leaving, d) })
				if len(now) > 0 {
					if err := keptRecord(k, now).add(&b); err != nil {
						return "", nil, err
					}
					k.Drawers = slices.DeleteFunc(slices.Clone(k.Drawers), func(d string) bool { return slices.Contains(now, d) })
					kept[key] = k
				}
			}
			resp, err := s.recipients.ExecuteTransactionalBatch(ctx, b, nil)
			if err == nil {
				s.tokens.note(containerRecipients, resp.SessionToken)
			}
			if err := batchError(resp, err); err != nil {
				return "", nil, err
			}
			version, ops = string(resp.OperationResults[0].ETag), ops[maxShelfOps:]
		}
		return version, ops, nil
	}
	for _, e := range sw.Entries {
		doc, shelves := fromEntry(sw.Recipient, e)
		gone, write := shelfChanges(stored[e.Key()], shelves)
		// The entry document's drawers that leave go with the first batch.
		var first []string
		if k, ok := kept[e.Key()]; ok {
			first = slices.DeleteFunc(slices.Clone(k.Drawers), func(d string) bool {
				return slices.ContainsFunc(stored[e.Key()], func(sh shelfDoc) bool {
					return slices.ContainsFunc(sh.Drawers, func(m drawerMeta) bool { return m.ID == d })
				})
			})
		}
		version, ops, err := ahead(e.Key(), doc, e.Version, shelfOps(stored[e.Key()], gone, write), first)
		if err != nil {
			return err
		}
		size := len(mustJSON(doc))
		var docs []string
		for _, op := range ops {
			size += op.bytes
			docs = append(docs, op.id)
		}
		units = append(units, withKept(e.Key(), unit{append(docs, doc.ID), size, func(b *azcosmos.TransactionalBatch) error {
			for _, op := range ops {
				op.add(b)
			}
			return batchWrite(b, doc, version)
		}}))
	}
	cursors := map[catalog.Key]catalog.Cursor{}
	for _, c := range sw.DeleteCursors {
		cursors[c.Key()] = c
	}
	deleteCursor := func(b *azcosmos.TransactionalBatch, c catalog.Cursor) {
		b.DeleteItem(cursorID(c.Key()), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag(c.Version)})
	}
	for _, e := range sw.DeleteEntries {
		c, withCursor := cursors[e.Key()]
		delete(cursors, e.Key())
		// The shelves it is stored with, not those fromEntry would fill
		// now: a hole at the start of its last drawer may have moved that
		// drawer's first run onto a later shelf, and a shelf no save wrote
		// would fail the batch, every time.
		doc, _ := fromEntry(sw.Recipient, e)
		var ids []string
		for _, sh := range stored[e.Key()] {
			ids = append(ids, sh.ID)
		}
		version, ops, err := ahead(e.Key(), doc, e.Version, shelfOps(stored[e.Key()], ids, nil), nil)
		if err != nil {
			return err
		}
		var docs []string
		for _, op := range ops {
			docs = append(docs, op.id)
		}
		docs = append(docs, entryID(e.Key()))
		if withCursor {
			docs = append(docs, cursorID(c.Key()))
		}
		units = append(units, withKept(e.Key(), unit{docs, 0, func(b *azcosmos.TransactionalBatch) error {
			for _, op := range ops {
				op.add(b)
			}
			b.DeleteItem(entryID(e.Key()), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag(version)})
			if withCursor {
				deleteCursor(b, c)
			}
			return nil
		}}))
	}
	for _, c := range sw.DeleteCursors {
		if _, alone := cursors[c.Key()]; alone {
			units = append(units, unit{[]string{cursorID(c.Key())}, 0, func(b *azcosmos.TransactionalBatch) error { deleteCursor(b, c); return nil }})
		}
	}
	// Kept drawers deleted above lose their record.
	for _, id := range sw.Done {
		units = append(units, unit{[]string{id}, 0, func(b *azcosmos.TransactionalBatch) error { b.DeleteItem(id, nil); return nil }})
	}
	// Expired bundles go in the same batches, each on the etag it was read
	// at: once the TTL removed a record that names no drawer, its id is
	// free, and a bundle an actor peeked under it since must stay. Each is
	// deleted once: a batch that meets one already gone (a replay, the
	// TTL) or changed fails whole and the next sweep, which reads again,
	// finishes.
	for _, rec := range sw.Bundles {
		var opts *azcosmos.TransactionalBatchItemOptions
		if rec.Version != "" {
			opts = &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag(rec.Version)}
		}
		units = append(units, unit{[]string{bundleDocID(rec.ID)}, 0, func(b *azcosmos.TransactionalBatch) error { b.DeleteItem(bundleDocID(rec.ID), opts); return nil }})
	}
	for len(units) > 0 {
		b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(sw.Recipient))
		var docs []string
		size, n := 0, 0
		for ; n < len(units); n++ {
			u := units[n]
			if n > 0 && (len(docs)+len(u.docs) > maxBatchOps || size+u.bytes > maxBatchBytes) {
				break
			}
			if err := u.add(&b); err != nil {
				return err
			}
			docs, size = append(docs, u.docs...), size+u.bytes
		}
		if resp, err := s.runBatch(ctx, s.recipients, b); err != nil {
			// Named, so that a batch that fails at every pass says on what.
			if i := failedOperation(resp); i >= 0 && i < len(docs) {
				err = fmt.Errorf("retention's batch failed on %s: %w", docs[i], err)
			}
			return err
		}
		units = units[n:]
	}
	return nil
}

// shelfOp is one shelf's delete or write in a sweep's catalog batch, and
// the drawers it takes out of the catalog.
type shelfOp struct {
	id     string
	bytes  int
	add    func(*azcosmos.TransactionalBatch)
	leaves []string
}

// maxShelfOps is the most shelf operations a batch of a cabinet's change
// holds: the rest of its hundred are its entry's, its cursor's and its kept
// record's.
const maxShelfOps = maxBatchOps - 3

// shelfOps are the deletes of the shelves gone and the writes of those
// written, of a cabinet whose shelves are stored.
func shelfOps(stored []shelfDoc, gone []string, write []shelfDoc) []shelfOp {
	// leaves is the drawers of stored shelf id that sh, its new content,
	// has not.
	leaves := func(id string, sh shelfDoc) []string {
		var out []string
		for _, old := range stored {
			if old.ID != id {
				continue
			}
			for _, m := range old.Drawers {
				if !slices.ContainsFunc(sh.Drawers, func(n drawerMeta) bool { return n.ID == m.ID }) {
					out = append(out, m.ID)
				}
			}
		}
		return out
	}
	var ops []shelfOp
	for _, id := range gone {
		ops = append(ops, shelfOp{id, 0, func(b *azcosmos.TransactionalBatch) { b.DeleteItem(id, nil) }, leaves(id, shelfDoc{})})
	}
	for _, sh := range write {
		raw := mustJSON(sh)
		ops = append(ops, shelfOp{sh.ID, len(raw), func(b *azcosmos.TransactionalBatch) { b.UpsertItem(raw, nil) }, leaves(sh.ID, sh)})
	}
	return ops
}

// storedShelves returns the recipient's shelves by cabinet, as of the state
// this process read last (the sweep's, whose entry etags its batches are
// conditioned on), when needed; else nothing. Only a sweep that takes
// drawers out of a cabinet, or takes a cabinet out, that may have shelves
// needs them.
func (s *Store) storedShelves(ctx context.Context, recipient string, needed bool) (map[catalog.Key][]shelfDoc, error) {
	out := map[catalog.Key][]shelfDoc{}
	if !needed {
		return out, nil
	}
	err := s.query(ctx, s.recipients, recipient, "SELECT * FROM c WHERE c.t = 'shelf'", nil, func(raw []byte) error {
		var d shelfDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		k := catalog.Key{Origin: domain.Origin(d.Origin), ContentType: d.CT}
		out[k] = append(out[k], d)
		return nil
	})
	return out, err
}

// mayBeShelved says whether a cabinet may have shelves: only one whose last
// drawer starts past the first shelf's positions.
func mayBeShelved(e catalog.Entry) bool {
	return len(e.Drawers) > 0 && e.Drawers[len(e.Drawers)-1].Start >= shelfPositions()
}

// shelfChanges compares a cabinet's stored shelves with those its new entry
// needs: the ones to delete (all of their drawers taken out) and the ones to
// write (some taken out, or, never expected, missing).
func shelfChanges(stored, want []shelfDoc) (gone []string, write []shelfDoc) {
	have := map[string]shelfDoc{}
	for _, sh := range stored {
		have[sh.ID] = sh
	}
	for _, sh := range want {
		if old, ok := have[sh.ID]; !ok || !slices.Equal(old.Drawers, sh.Drawers) {
			write = append(write, sh)
		}
		delete(have, sh.ID)
	}
	for _, sh := range stored {
		if _, ok := have[sh.ID]; ok {
			gone = append(gone, sh.ID)
		}
	}
	return gone, write
}

// deleteDrawer deletes the id documents nothing needs any more, then the
// drawer's pages that start below below: those of the saves whose pages
// it holds once none of their other drawers is left (releaseIDs). Its
// pages go last because they name the saves, so a pass that stops
// half-way is finished by the next, which finds the same pages.
func (s *Store) deleteDrawer(ctx context.Context, drawerID string, below int64) error {
	sql, params := "SELECT c.id, c.sv FROM c", []azcosmos.QueryParameter(nil)
	if below < math.MaxInt64 {
		sql, params = "SELECT c.id, c.sv FROM c WHERE c.s < @below", []azcosmos.QueryParameter{{Name: "@below", Value: below}}
	}
	var pages, saves []string
	err := s.query(ctx, s.drawers, drawerID, sql, params, func(raw []byte) error {
		var d struct{ ID, SV string }
		err := json.Unmarshal(raw, &d)
		pages = append(pages, d.ID)
		if !slices.Contains(saves, d.SV) {
			saves = append(saves, d.SV)
		}
		return err
	})
	if err != nil || len(pages) == 0 {
		return err
	}
	if err := s.releaseIDs(ctx, drawerID, saves); err != nil {
		return err
	}
	return s.deleteAll(ctx, s.drawers, drawerID, pages)
}

// deleteAll deletes documents of one partition in batches of 100; one that
// is gone already (a replay, another instance's retention) is no reason to
// leave the others: its batch is redone one document at a time.
func (s *Store) deleteAll(ctx context.Context, c *azcosmos.ContainerClient, pk string, ids []string) error {
	for chunk := range slices.Chunk(ids, maxBatchOps) {
		b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
		for _, id := range chunk {
			b.DeleteItem(id, nil)
		}
		err := s.execute(ctx, c, b)
		if !errors.Is(err, store.ErrConflict) {
			if err != nil {
				return err
			}
			continue
		}
		for _, id := range chunk { // one was missing: the others one by one
			if err := s.deleteItem(ctx, c, azcosmos.NewPartitionKeyString(pk), id); err != nil && !isStatus(err, http.StatusNotFound) {
				return err
			}
		}
	}
	return nil
}

// maxBatchOps is Cosmos DB's limit of operations in one transactional batch.
const maxBatchOps = 100

// execute runs a transactional batch; a failed precondition or an existing
// id anywhere in it is ErrConflict.
func (s *Store) execute(ctx context.Context, c *azcosmos.ContainerClient, b azcosmos.TransactionalBatch) error {
	_, err := s.run(ctx, c, b)
	return err
}

// run is execute that also returns the batch's session token.
func (s *Store) run(ctx context.Context, c *azcosmos.ContainerClient, b azcosmos.TransactionalBatch) (string, error) {
	resp, err := s.runBatch(ctx, c, b)
	return resp.SessionToken, err
}

// runBatch is execute that also returns the batch's response.
func (s *Store) runBatch(ctx context.Context, c *azcosmos.ContainerClient, b azcosmos.TransactionalBatch) (azcosmos.TransactionalBatchResponse, error) {
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err == nil {
		s.tokens.note(c.ID(), resp.SessionToken)
	}
	return resp, batchError(resp, err)
}

// batchCreate adds a create of doc.
func batchCreate(b *azcosmos.TransactionalBatch, doc any) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	b.CreateItem(raw, nil)
	return nil
}

// batchWrite adds a create of doc when version is empty, else a replace on
// that etag.
func batchWrite(b *azcosmos.TransactionalBatch, doc interface{ docID() string }, version string) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if version == "" {
		b.CreateItem(raw, nil)
	} else {
		b.ReplaceItem(doc.docID(), raw, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag(version)})
	}
	return nil
}

func (d entryDoc) docID() string  { return d.ID }
func (d cursorDoc) docID() string { return d.ID }
func (d bundleDoc) docID() string { return d.ID }
func (d headDoc) docID() string   { return d.ID }

// query runs a query within one partition, as fresh as the session
// tokens this store holds for the container, and calls fn for every item.
func (s *Store) query(ctx context.Context, c *azcosmos.ContainerClient, pk, sql string, params []azcosmos.QueryParameter, fn func([]byte) error) error {
	return queryWith(ctx, c, pk, sql, &azcosmos.QueryOptions{QueryParameters: params, SessionToken: s.tokens.get(c.ID())}, fn)
}

// readItem reads one item with the container's session tokens and token (a
// token recorded by whoever wrote it; may be empty).
func (s *Store) readItem(ctx context.Context, c *azcosmos.ContainerClient, pk azcosmos.PartitionKey, id, token string) (azcosmos.ItemResponse, error) {
	opts := &azcosmos.ItemOptions{SessionToken: s.tokens.get(c.ID())}
	if token != "" {
		merged := token
		if opts.SessionToken != nil {
			merged = mergeTokens(token, *opts.SessionToken)
		}
		opts.SessionToken = &merged
	}
	return c.ReadItem(ctx, pk, id, opts)
}

// deleteItem deletes one item and keeps the token of the delete, so that
// this process's reads no longer find it.
func (s *Store) deleteItem(ctx context.Context, c *azcosmos.ContainerClient, pk azcosmos.PartitionKey, id string) error {
	resp, err := c.DeleteItem(ctx, pk, id, nil)
	if err == nil && resp.SessionToken != nil {
		s.tokens.note(c.ID(), *resp.SessionToken)
	}
	// A 404 ran on the primary too: callers take it for deleted (a resend
	// after a lost answer meets its own delete), so its token is kept as a
	// success's would be, lest this process read the document back.
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.RawResponse != nil {
		s.tokens.note(c.ID(), re.RawResponse.Header.Get("x-ms-session-token"))
	}
	return err
}

func queryWith(ctx context.Context, c *azcosmos.ContainerClient, pk, sql string, opts *azcosmos.QueryOptions, fn func([]byte) error) error {
	pager := c.NewQueryItemsPager(sql, azcosmos.NewPartitionKeyString(pk), opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, raw := range page.Items {
			if err := fn(raw); err != nil {
				return err
			}
		}
	}
	return nil
}
