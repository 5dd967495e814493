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
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
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
	// back (default 30 s).
	Lease time.Duration
	// IDBuckets spreads the id index over this many partitions (1..256,
	// default 16): fewer means fewer requests per save, more means less
	// load on each partition.
	IDBuckets int
	// Transport sends the SDK's requests (default: a pooled HTTP client).
	Transport policy.Transporter
	// OnRequest, when set, is told about every request (for metrics).
	OnRequest RequestObserver
	Logger    *slog.Logger
	Now       func() time.Time
}

// Store is the Cosmos DB repository.Store.
type Store struct {
	cfg        Config
	client     *azcosmos.Client
	meter      *Meter
	recipients *azcosmos.ContainerClient
	drawers    *azcosmos.ContainerClient
	ids        *azcosmos.ContainerClient
	saves      *azcosmos.ContainerClient

	tokens *sessionTokens
	// anchored: reads of a recipient's state first read its head on the
	// primary (Session consistency); stronger levels read a quorum anyway.
	anchored bool
}

var _ repository.Store = (*Store)(nil)

// Open connects to the account and, when cfg.Provision is set, creates what
// is missing.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Database == "" {
		cfg.Database = "messagehub"
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.IDBuckets <= 0 {
		cfg.IDBuckets = 16
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
		cfg.Transport = &http.Client{Transport: pooledTransport()}
	}
	// The meter sits below the retries, so that it counts every attempt.
	account := &accountReader{next: cfg.Transport}
	meter := NewMeter(account, cfg.OnRequest)
	opts := &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: retrying{next: meter, attempts: 4, backoff: 50 * time.Millisecond},
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
	if cfg.Provision {
		if err := provision(ctx, client, cfg.Database, cfg.Throughput); err != nil {
			return nil, err
		}
	} else if db, err := client.NewDatabase(cfg.Database); err != nil {
		return nil, err
	} else if _, err := db.Read(ctx, nil); err != nil {
		return nil, fmt.Errorf("cosmos: database %s: %w", cfg.Database, err)
	}
	// The SDK read the account's properties before its first request.
	level := account.consistency()
	if err := checkConsistency(level); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, client: client, meter: meter, tokens: newSessionTokens(), anchored: strings.EqualFold(level, "Session")}
	for _, c := range []struct {
		name string
		dst  **azcosmos.ContainerClient
	}{{containerRecipients, &s.recipients}, {containerDrawers, &s.drawers}, {containerIDs, &s.ids}, {containerSaves, &s.saves}} {
		if *c.dst, err = client.NewContainer(cfg.Database, c.name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func pooledTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 256
	return t
}

// Meter counts this store's requests.
func (s *Store) Meter() *Meter { return s.meter }

// Close releases the client's connections.
func (s *Store) Close() error {
	s.client.Close()
	return nil
}

// LoadRecipient reads the head, catalog, cursors and pending bundles in one
// query. A head with expired reservations is repaired first.
func (s *Store) LoadRecipient(ctx context.Context, recipient string) (repository.RecipientState, error) {
	for attempt := 0; ; attempt++ {
		st, head, err := s.loadRecipient(ctx, recipient)
		if err != nil || attempt > 0 || !s.hasExpired(head) {
			return st, err
		}
		if err := s.resolveExpired(ctx, recipient); err != nil && !errors.Is(err, repository.ErrConflict) {
			return st, err
		}
	}
}

func (s *Store) loadRecipient(ctx context.Context, recipient string) (repository.RecipientState, headDoc, error) {
	var st repository.RecipientState
	var head headDoc
	if err := s.anchor(ctx, recipient); err != nil {
		return st, head, err
	}
	err := s.query(ctx, s.recipients, recipient,
		"SELECT * FROM c WHERE c.t IN ('head', 'entry', 'cursor', 'pending')", nil,
		func(raw []byte) error {
			var probe struct{ T string }
			if err := json.Unmarshal(raw, &probe); err != nil {
				return err
			}
			switch probe.T {
			case typeHead:
				if err := json.Unmarshal(raw, &head); err != nil {
					return err
				}
				st.Head = repository.Head{NextSeq: head.Next, Watermark: head.Watermark, Version: head.ETag}
				// The pages below this watermark are read with their token.
				s.tokens.note(containerDrawers, head.DrawersToken)
			case typeEntry:
				var d entryDoc
				if err := json.Unmarshal(raw, &d); err != nil {
					return err
				}
				st.Entries = append(st.Entries, toEntry(d))
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
	return st, head, err
}

// anchor reads the recipient's head on the primary (a transactional batch
// runs there) and keeps the answer's session token, so that the query of the
// recipient's state that follows sees every write that succeeded before it,
// whichever instance made it. A head that does not exist yet fails the batch
// but still answers with a token.
func (s *Store) anchor(ctx context.Context, recipient string) error {
	if !s.anchored {
		return nil
	}
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	b.ReadItem(headID, nil)
	resp, err := s.recipients.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	s.tokens.note(containerRecipients, resp.SessionToken)
	return nil
}

// ReadDrawer queries the drawer's pages overlapping [from, to).
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	var items []drawer.Item
	errEnough := errors.New("enough")
	err := s.query(ctx, s.drawers, drawerID,
		"SELECT * FROM c WHERE c.e > @from AND c.s < @to ORDER BY c.s",
		[]azcosmos.QueryParameter{{Name: "@from", Value: from}, {Name: "@to", Value: to}},
		func(raw []byte) error {
			var p pageDoc
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for i, rawItem := range p.Items {
				pos := p.Start + int64(i)
				if pos < from || pos >= to {
					continue
				}
				it, err := decodeItem(rawItem, pos)
				if err != nil {
					return fmt.Errorf("drawer %s: %w", drawerID, err)
				}
				items = append(items, it)
				if len(items) >= limit {
					return errEnough
				}
			}
			return nil
		})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return items, err
}

// BundleExists reads the bundle's document.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	_, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), bundleDocID(bundleID), "")
	if isStatus(err, http.StatusNotFound) {
		return false, nil
	}
	return err == nil, err
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
	return s.execute(ctx, s.recipients, b)
}

// Acknowledge deletes the group's slot, marks the bundle dequeued (to expire
// after the retention) and moves the cursor, in one transactional batch.
func (s *Store) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	if rec.Announce {
		// Notices of dequeues (bundle content) are not built on Cosmos DB
		// yet; the binary refuses content providers with --store cosmos.
		return errors.New("cosmos: notices of dequeues are not supported")
	}
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	b.DeleteItem(slotID(rec.Group), nil)
	doc := fromBundle(recipient, rec)
	doc.TTL = ptr(int32(s.cfg.Retention / time.Second))
	if err := batchWrite(&b, doc, rec.Version); err != nil {
		return err
	}
	if err := batchWrite(&b, fromCursor(recipient, cursor), cursor.Version); err != nil {
		return err
	}
	err := s.execute(ctx, s.recipients, b)
	if errors.Is(err, repository.ErrConflict) {
		// A replay of our own batch after a lost answer: the bundle is
		// dequeued, at the moment we dequeued it.
		var now bundleDoc
		if found, rerr := s.readOnPrimary(ctx, s.recipients, recipient, doc.ID, &now); rerr == nil && found &&
			now.T == typeDequeued && now.DequeuedAt == doc.DequeuedAt {
			return nil
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
		return err
	}
	for _, r := range recipients {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DequeuedBundles lists the recipient's dequeued bundles not yet expired.
func (s *Store) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	var out []bundle.Record
	err := s.query(ctx, s.recipients, recipient, "SELECT * FROM c WHERE c.t = 'dequeued'", nil, func(raw []byte) error {
		var d bundleDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		out = append(out, toBundle(d))
		return nil
	})
	return out, err
}

// ApplySweep deletes the drawers' pages and id records first, then updates
// the catalog: a crash in between leaves only entries pointing at drawers
// already acknowledged, which the next sweep removes again.
func (s *Store) ApplySweep(ctx context.Context, sw repository.Sweep) error {
	for _, d := range sw.Drawers {
		if err := s.deleteDrawer(ctx, d); err != nil {
			return err
		}
	}
	if err := s.sweepCatalog(ctx, sw); err != nil {
		return err
	}
	// Dequeued bundles also carry a TTL; deleting them here keeps retention
	// exact where the TTL would lag.
	for _, id := range sw.Bundles {
		err := s.deleteItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(sw.Recipient), bundleDocID(id))
		if err != nil && !isStatus(err, http.StatusNotFound) {
			return err
		}
	}
	return nil
}

// sweepCatalog writes the sweep's entry replaces and deletes in batches
// within Cosmos DB's limits (a recipient may have thousands of cabinets).
// An entry and its cursor are deleted in one batch: a cursor left alone
// would count a new entry's first positions as acknowledged. Cabinets are
// independent, so a batch that fails leaves the others' done, for the next
// sweep to finish.
func (s *Store) sweepCatalog(ctx context.Context, sw repository.Sweep) error {
	type unit struct {
		ops   int
		bytes int
		add   func(*azcosmos.TransactionalBatch) error
	}
	var units []unit
	for _, e := range sw.Entries {
		raw := mustJSON(fromEntry(sw.Recipient, e))
		units = append(units, unit{1, len(raw), func(b *azcosmos.TransactionalBatch) error {
			return batchWrite(b, fromEntry(sw.Recipient, e), e.Version)
		}})
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
		units = append(units, unit{2, 0, func(b *azcosmos.TransactionalBatch) error {
			b.DeleteItem(entryID(e.Key()), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag(e.Version)})
			if withCursor {
				deleteCursor(b, c)
			}
			return nil
		}})
	}
	for _, c := range sw.DeleteCursors {
		if _, alone := cursors[c.Key()]; alone {
			units = append(units, unit{1, 0, func(b *azcosmos.TransactionalBatch) error { deleteCursor(b, c); return nil }})
		}
	}
	for len(units) > 0 {
		b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(sw.Recipient))
		ops, size, n := 0, 0, 0
		for ; n < len(units); n++ {
			u := units[n]
			if n > 0 && (ops+u.ops > maxBatchOps || size+u.bytes > maxBatchBytes) {
				break
			}
			if err := u.add(&b); err != nil {
				return err
			}
			ops, size = ops+u.ops, size+u.bytes
		}
		if err := s.execute(ctx, s.recipients, b); err != nil {
			return err
		}
		units = units[n:]
	}
	return nil
}

// deleteDrawer deletes a drawer's pages and the id documents pointing at it.
func (s *Store) deleteDrawer(ctx context.Context, drawerID string) error {
	var pages []string
	err := s.query(ctx, s.drawers, drawerID, "SELECT c.id FROM c", nil, func(raw []byte) error {
		var d struct{ ID string }
		err := json.Unmarshal(raw, &d)
		pages = append(pages, d.ID)
		return err
	})
	if err != nil {
		return err
	}
	if err := s.deleteAll(ctx, s.drawers, drawerID, pages); err != nil {
		return err
	}
	for bucket := range s.cfg.IDBuckets {
		pk := bucketKey(bucket)
		var docs []string
		err := s.query(ctx, s.ids, pk, "SELECT c.id FROM c WHERE c.d = @d",
			[]azcosmos.QueryParameter{{Name: "@d", Value: drawerID}}, func(raw []byte) error {
				var d struct{ ID string }
				err := json.Unmarshal(raw, &d)
				docs = append(docs, d.ID)
				return err
			})
		if err != nil {
			return err
		}
		if err := s.deleteAll(ctx, s.ids, pk, docs); err != nil {
			return err
		}
	}
	return nil
}

// deleteAll deletes documents of one partition, 100 per batch.
func (s *Store) deleteAll(ctx context.Context, c *azcosmos.ContainerClient, pk string, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), maxBatchOps)
		b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
		for _, id := range ids[:n] {
			b.DeleteItem(id, nil)
		}
		if err := s.execute(ctx, c, b); err != nil && !errors.Is(err, repository.ErrConflict) {
			return err
		}
		ids = ids[n:]
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
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err == nil {
		s.tokens.note(c.ID(), resp.SessionToken)
	}
	return resp.SessionToken, batchError(resp, err)
}

// batchError maps a batch's outcome to the store's errors.
func batchError(resp azcosmos.TransactionalBatchResponse, err error) error {
	if err != nil {
		if isStatus(err, http.StatusConflict) || isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("%w: %w", repository.ErrConflict, err)
		}
		return err
	}
	if resp.Success {
		return nil
	}
	for _, r := range resp.OperationResults {
		switch r.StatusCode {
		case http.StatusConflict, http.StatusPreconditionFailed, http.StatusNotFound:
			return fmt.Errorf("%w: batch operation answered %d", repository.ErrConflict, r.StatusCode)
		}
	}
	return fmt.Errorf("cosmos: transactional batch failed: %+v", statusCodes(resp))
}

func statusCodes(resp azcosmos.TransactionalBatchResponse) []int32 {
	var codes []int32
	for _, r := range resp.OperationResults {
		codes = append(codes, r.StatusCode)
	}
	return codes
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
