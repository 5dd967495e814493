package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/repository"
)

// A save, across all the recipients it touches:
//
//  1. create its commit record (state pending);
//  2. reserve, per recipient, in one batch: the head takes the sequence
//     numbers and records the reservation (what will be written, and until
//     when); the catalog entries take the positions. The watermark stays;
//  3. write the drawer pages and the id documents;
//  4. look the ids up again: if another save stored one meanwhile, give way;
//  5. commit: the commit record becomes committed (one conditional write —
//     the save's single point of truth);
//  6. finalize, per recipient: drop the reservation and move the watermark
//     up to the first reservation still outstanding.
//
// A failure before 5 rolls back: the record is marked aborted, what was
// written is deleted, the reservations are dropped, their numbers and
// positions stay unused. A save that dies is found by whoever next loads the
// recipient after its lease: a committed one is finalized, any other aborted
// and rolled back.

// idWrite is one id document to write, with the bucket it belongs to.
type idWrite struct {
	bucket string
	doc    idDoc
}

// CommitSaves writes a group of saves with the protocol above.
func (s *Store) CommitSaves(ctx context.Context, saves []repository.RecipientSave) error {
	saveID := uuid.NewString()
	expires := s.cfg.Now().Add(s.cfg.Lease).UnixMilli()
	plans := make([]savePlan, len(saves))
	for i, sv := range saves {
		p, err := s.plan(saveID, expires, sv)
		if err != nil {
			return err
		}
		plans[i] = p
	}
	record := saveDoc{ID: saveID, PK: saveID, State: statePending, TTL: int32(s.cfg.Retention.Seconds())}
	resp, err := s.saves.CreateItem(ctx, azcosmos.NewPartitionKeyString(saveID), mustJSON(record), nil)
	if err != nil {
		return err
	}
	version := string(resp.ETag)
	// Whoever reads the record because of what this save wrote reads it
	// with its token: a lagging replica's 404 is no abort.
	if resp.SessionToken != nil {
		s.tokens.note(containerSaves, *resp.SessionToken)
		for i := range plans {
			plans[i].res.Token = *resp.SessionToken
			for j := range plans[i].ids {
				plans[i].ids[j].doc.Token = *resp.SessionToken
			}
		}
	}

	reserved, err := s.reserveAll(ctx, plans)
	var pagesToken string
	if err == nil {
		pagesToken, err = s.writeData(ctx, plans)
	}
	if err == nil {
		err = s.checkIDs(ctx, saveID, plans)
	}
	if err == nil {
		// Committed records never expire: they vouch for the ids as long as
		// the data is kept.
		record.State, record.TTL = stateCommitted, -1
		var resp azcosmos.ItemResponse
		resp, err = s.saves.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(saveID), saveID, mustJSON(record),
			&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
		if err == nil && resp.SessionToken != nil {
			s.tokens.note(containerSaves, *resp.SessionToken)
		}
		if isStatus(err, http.StatusPreconditionFailed) {
			// A replay of our own commit after a lost answer, or our lease
			// ran out and someone aborted the save: the record says which.
			if d, rerr := s.readSaveOnPrimary(ctx, saveID); rerr == nil && d.State == stateCommitted {
				err = nil
			} else {
				err = fmt.Errorf("%w: save %s was aborted", repository.ErrConflict, saveID)
			}
		}
	}
	if err != nil {
		// The abort is best effort: an unfinished one is completed by
		// whoever finds the expired reservations.
		s.abort(context.WithoutCancel(ctx), record, version, plans[:reserved])
		return err
	}
	// Committed is final: the save succeeded whatever happens next, so
	// finalizing is retried until done, without depending on the caller
	// still waiting. Should it fail for longer than finalizeFor, whoever
	// loads the recipient after the lease finalizes it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalizeFor)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := s.finalizeAll(ctx, saveID, plans, pagesToken)
		if err == nil {
			return nil
		}
		s.cfg.Logger.Warn("cosmos: finalizing a committed save failed; retrying", "save", saveID, "attempt", attempt+1, "err", err)
		if !pause(ctx, attempt) {
			s.cfg.Logger.Error("cosmos: committed save not finalized; its lease will", "save", saveID, "err", err)
			return nil
		}
	}
}

// finalizeFor bounds the retries of a committed save's finalize.
const finalizeFor = 10 * time.Minute

// savePlan is one recipient's part of a save as documents.
type savePlan struct {
	save  repository.RecipientSave
	res   reservation
	pages []pageDoc
	ids   []idWrite
}

func (s *Store) plan(saveID string, expires int64, sv repository.RecipientSave) (savePlan, error) {
	p := savePlan{save: sv, res: reservation{Save: saveID, Expires: expires}}
	p.res.Ranges = takenRanges(sv)
	for _, pg := range sv.Pages {
		doc, err := encodePage(pg)
		if err != nil {
			return p, err
		}
		p.pages = append(p.pages, doc)
		p.res.Pages = append(p.res.Pages, pageRef{Drawer: doc.PK, ID: doc.ID})
	}
	// One id document per bucket and drawer: small enough to stay cheap,
	// few enough to write in a handful of requests.
	byDoc := map[[2]string]*idWrite{}
	var order [][2]string
	for _, rec := range sv.IDs {
		key := [2]string{s.bucketOf(rec.ID), rec.DrawerID}
		w, ok := byDoc[key]
		if !ok {
			w = &idWrite{bucket: key[0], doc: idDoc{ID: saveID + ":" + rec.DrawerID, PK: key[0], Drawer: rec.DrawerID, Save: saveID}}
			byDoc[key] = w
			order = append(order, key)
		}
		w.doc.N = append(w.doc.N, idEntry{ID: rec.ID, Fingerprint: fingerprintString(rec.Fingerprint)})
	}
	for _, k := range order {
		p.ids = append(p.ids, *byDoc[k])
		p.res.IDDocs = append(p.res.IDDocs, docRef{PK: byDoc[k].bucket, ID: byDoc[k].doc.ID})
	}
	return p, nil
}

// takenRanges are the positions a save takes in each cabinet: the tail of
// each entry it writes, as long as the items it files there.
func takenRanges(sv repository.RecipientSave) []posRange {
	cabinetOf := map[string]catalog.Key{}
	for _, e := range sv.Entries {
		for _, d := range e.Drawers {
			cabinetOf[d.ID] = e.Key()
		}
	}
	taken := map[catalog.Key]int64{}
	for _, pg := range sv.Pages {
		taken[cabinetOf[pg.DrawerID]] += int64(len(pg.Items))
	}
	var out []posRange
	for _, e := range sv.Entries {
		if n := taken[e.Key()]; n > 0 {
			out = append(out, posRange{Origin: int32(e.Origin), CT: e.ContentType, Start: e.Total - n, End: e.Total})
		}
	}
	return out
}

// reserveAll reserves on every recipient's head; it returns how many plans
// (a prefix) hold a reservation.
func (s *Store) reserveAll(ctx context.Context, plans []savePlan) (int, error) {
	for i := range plans {
		if err := s.reserve(ctx, &plans[i], plans[i].res); err != nil {
			return i, err
		}
	}
	return len(plans), nil
}

func (s *Store) reserve(ctx context.Context, p *savePlan, res reservation) error {
	sv := p.save
	head := headDoc{ID: headID, PK: sv.Recipient, T: typeHead}
	if sv.Head.Version != "" {
		item, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(sv.Recipient), headID, "")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(item.Value, &head); err != nil {
			return err
		}
		if head.ETag != sv.Head.Version {
			return fmt.Errorf("%w: head of %s changed", repository.ErrConflict, sv.Recipient)
		}
	} else if err := s.register(ctx, sv.Recipient); err != nil {
		return err
	}
	// The watermark stays where it is until the save is finalized.
	res.From, res.To = max(head.Next, 1), sv.Head.NextSeq-1
	head.Next = sv.Head.NextSeq
	head.Reservations = append(head.Reservations, res)
	p.res = res
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(sv.Recipient))
	version := head.ETag
	head.ETag = ""
	if err := batchWrite(&b, head, version); err != nil {
		return err
	}
	for _, e := range sv.Entries {
		if err := batchWrite(&b, fromEntry(sv.Recipient, e), e.Version); err != nil {
			return err
		}
	}
	err := s.execute(ctx, s.recipients, b)
	if errors.Is(err, repository.ErrConflict) {
		// A replay of our own batch after a lost answer finds its own
		// effect: the head holds our reservation.
		var now headDoc
		if found, rerr := s.readOnPrimary(ctx, s.recipients, sv.Recipient, headID, &now); rerr == nil && found &&
			slices.ContainsFunc(now.Reservations, func(r reservation) bool { return r.Save == res.Save }) {
			return nil
		}
	}
	return err
}

// register records a new recipient in the registry partition.
func (s *Store) register(ctx context.Context, recipient string) error {
	doc := map[string]string{"id": recipient, "pk": registryPartition, "t": typeRegistry}
	_, err := s.recipients.CreateItem(ctx, azcosmos.NewPartitionKeyString(registryPartition), mustJSON(doc), nil)
	if err != nil && !isStatus(err, http.StatusConflict) {
		return err
	}
	return nil
}

// writeData writes pages (batched per drawer) and id documents in parallel,
// and returns the merged session token of the page batches.
func (s *Store) writeData(ctx context.Context, plans []savePlan) (string, error) {
	var mu sync.Mutex
	var tokens []string
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range plans {
		byDrawer := map[string][]pageDoc{}
		for _, pg := range p.pages {
			byDrawer[pg.PK] = append(byDrawer[pg.PK], pg)
		}
		for drawerID, pages := range byDrawer {
			for _, chunk := range pageBatches(pages) {
				g.Go(func() error {
					b := s.drawers.NewTransactionalBatch(azcosmos.NewPartitionKeyString(drawerID))
					for _, raw := range chunk {
						b.CreateItem(raw, nil)
					}
					token, err := s.run(ctx, s.drawers, b)
					if errors.Is(err, repository.ErrConflict) {
						// Only this save writes these positions: a page
						// that exists is its own, written by a replay's
						// first attempt whose answer was lost.
						err = nil
					}
					mu.Lock()
					tokens = append(tokens, token)
					mu.Unlock()
					return err
				})
			}
		}
		for _, w := range p.ids {
			g.Go(func() error {
				resp, err := s.ids.CreateItem(ctx, azcosmos.NewPartitionKeyString(w.bucket), mustJSON(w.doc), nil)
				if isStatus(err, http.StatusConflict) {
					return nil // its id names this save: our own, from a replay
				}
				if err == nil && resp.SessionToken != nil {
					// The lookup after writing must see every id document
					// written before this one: it reads with this token.
					s.tokens.note(containerIDs, *resp.SessionToken)
				}
				return err
			})
		}
	}
	err := g.Wait()
	return mergeTokens(tokens...), err
}

// Cosmos DB refuses a request over 2 MB and a batch of more than 100
// operations; page batches keep a margin below both.
const (
	maxBatchBytes = 1_500_000
	maxPageOps    = 50
)

// pageBatches groups a drawer's pages, as JSON, into batches within the
// request limits; a page is never split (drawer.PageSize bounds it).
func pageBatches(pages []pageDoc) [][][]byte {
	var out [][][]byte
	var cur [][]byte
	size := 0
	for _, pg := range pages {
		raw := mustJSON(pg)
		if len(cur) > 0 && (size+len(raw) > maxBatchBytes || len(cur) >= maxPageOps) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, raw)
		size += len(raw)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// checkIDs looks the save's ids up again after writing them: an id some
// other save holds too means this one gives way, as a duplicate when the
// other one is committed, to be retried when it is still in flight.
func (s *Store) checkIDs(ctx context.Context, saveID string, plans []savePlan) error {
	var ids []string
	for _, p := range plans {
		for _, rec := range p.save.IDs {
			ids = append(ids, rec.ID)
		}
	}
	hits, err := s.lookup(ctx, ids, saveID)
	if err != nil {
		return err
	}
	existing, inFlight, err := s.settledHits(ctx, hits)
	if err != nil {
		return err
	}
	if len(existing) > 0 {
		return &repository.IDsExistError{Records: existing}
	}
	if inFlight {
		return fmt.Errorf("%w: another save of the same ids is in flight", repository.ErrConflict)
	}
	return nil
}

// LookupIDs returns the ids stored by committed saves.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]repository.IDRecord, error) {
	hits, err := s.lookup(ctx, ids, "")
	if err != nil {
		return nil, err
	}
	found, _, err := s.settledHits(ctx, hits)
	return found, err
}

// settledHits returns the hits whose save is committed, and whether any
// belongs to a save still in flight. Each save's record is read once, however
// many of its ids were hit.
func (s *Store) settledHits(ctx context.Context, hits []idHit) (committed map[string]repository.IDRecord, inFlight bool, err error) {
	committed = make(map[string]repository.IDRecord)
	states := make(map[string]string)
	for _, h := range hits {
		state, ok := states[h.Save]
		if !ok {
			if state, err = s.saveState(ctx, h.Save, h.Token); err != nil {
				return nil, false, err
			}
			states[h.Save] = state
		}
		switch state {
		case stateCommitted:
			if committed[h.ID], err = h.record(); err != nil {
				return nil, false, err
			}
		case statePending:
			inFlight = true
		}
	}
	return committed, inFlight, nil
}

// lookup queries each bucket the ids fall in, in parallel, leaving out the
// entries of the save named by except.
func (s *Store) lookup(ctx context.Context, ids []string, except string) ([]idHit, error) {
	byBucket := map[string][]string{}
	for _, id := range ids {
		b := s.bucketOf(id)
		byBucket[b] = append(byBucket[b], id)
	}
	var mu sync.Mutex
	var hits []idHit
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for bucket, inBucket := range byBucket {
		g.Go(func() error {
			return s.query(ctx, s.ids, bucket,
				"SELECT n.i, n.f, c.d, c.s, c.st FROM c JOIN n IN c.n WHERE c.s != @except AND ARRAY_CONTAINS(@ids, n.i)",
				[]azcosmos.QueryParameter{{Name: "@ids", Value: inBucket}, {Name: "@except", Value: except}},
				func(raw []byte) error {
					var h idHit
					if err := json.Unmarshal(raw, &h); err != nil {
						return err
					}
					mu.Lock()
					hits = append(hits, h)
					mu.Unlock()
					return nil
				})
		})
	}
	return hits, g.Wait()
}

func (h idHit) record() (repository.IDRecord, error) {
	fp, err := parseFingerprint(h.Fingerprint)
	return repository.IDRecord{ID: h.ID, Fingerprint: fp, DrawerID: h.Drawer}, err
}

// saveState reads a save's commit record with the token it was created
// with. One that no longer exists was aborted and expired (committed records
// outlive the data they cover).
func (s *Store) saveState(ctx context.Context, saveID, token string) (string, error) {
	item, err := s.readItem(ctx, s.saves, azcosmos.NewPartitionKeyString(saveID), saveID, token)
	if isStatus(err, http.StatusNotFound) {
		return stateAborted, nil
	}
	if err != nil {
		return "", err
	}
	var d saveDoc
	return d.State, json.Unmarshal(item.Value, &d)
}

// bucketOf spreads ids over the id partitions by their first hex digits.
func (s *Store) bucketOf(id string) string {
	v, _ := strconv.ParseUint(id[:2], 16, 8)
	return bucketKey(int(v) % s.cfg.IDBuckets)
}

func bucketKey(b int) string { return "b" + strconv.Itoa(b) }

// finalizeAll drops the reservation from every head, moving the watermarks.
// The head keeps the pages' session token, for readers on any instance.
func (s *Store) finalizeAll(ctx context.Context, saveID string, plans []savePlan, pagesToken string) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, p := range plans {
		g.Go(func() error {
			return s.updateHead(ctx, p.save.Recipient, func(h *headDoc) bool {
				if !dropReservation(h, saveID, p.save.Head.Watermark) {
					return false
				}
				h.DrawersToken = mergeTokens(h.DrawersToken, pagesToken)
				return true
			})
		})
	}
	return g.Wait()
}

// dropReservation removes a save's reservation and moves the watermark as
// far as outstanding reservations allow, but not past limit.
func dropReservation(h *headDoc, saveID string, limit int64) bool {
	i := slices.IndexFunc(h.Reservations, func(r reservation) bool { return r.Save == saveID })
	if i < 0 {
		return false
	}
	h.Reservations = slices.Delete(h.Reservations, i, i+1)
	h.Watermark = max(h.Watermark, min(h.watermark(), limit))
	return true
}

// readHead reads the recipient's head; its ETag is the version read.
func (s *Store) readHead(ctx context.Context, pk azcosmos.PartitionKey) (headDoc, error) {
	item, err := s.readItem(ctx, s.recipients, pk, headID, "")
	if err != nil {
		return headDoc{}, err
	}
	var h headDoc
	err = json.Unmarshal(item.Value, &h)
	return h, err
}

// updateHead applies change to the recipient's head with optimistic
// concurrency, rereading after a lost race. change reports whether there is
// anything to write.
func (s *Store) updateHead(ctx context.Context, recipient string, change func(*headDoc) bool) error {
	pk := azcosmos.NewPartitionKeyString(recipient)
	for attempt := 0; ; attempt++ {
		h, err := s.readHead(ctx, pk)
		if err != nil {
			return err
		}
		version := h.ETag
		if !change(&h) {
			return nil
		}
		h.ETag = ""
		_, err = s.recipients.ReplaceItem(ctx, pk, headID, mustJSON(h), &azcosmos.ItemOptions{IfMatchEtag: etag(version)})
		if !isStatus(err, http.StatusPreconditionFailed) {
			return err
		}
		if !pause(ctx, attempt) {
			return ctx.Err()
		}
	}
}

// abort marks the save aborted and undoes what it reserved and wrote.
func (s *Store) abort(ctx context.Context, record saveDoc, version string, plans []savePlan) {
	record.State = stateAborted
	_, err := s.saves.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(record.ID), record.ID, mustJSON(record),
		&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
	if err != nil && !isStatus(err, http.StatusPreconditionFailed) {
		s.cfg.Logger.Warn("cosmos: could not abort save; its lease will", "save", record.ID, "err", err)
		return
	}
	for _, p := range plans {
		if err := s.rollback(ctx, p.save.Recipient, p.res); err != nil {
			s.cfg.Logger.Warn("cosmos: rollback incomplete; its lease will finish it", "save", record.ID, "err", err)
		}
	}
}

// rollback deletes what a reservation wrote, then drops it from the head.
func (s *Store) rollback(ctx context.Context, recipient string, res reservation) error {
	for _, pg := range res.Pages {
		err := s.deleteItem(ctx, s.drawers, azcosmos.NewPartitionKeyString(pg.Drawer), pg.ID)
		if err != nil && !isStatus(err, http.StatusNotFound) {
			return err
		}
	}
	for _, d := range res.IDDocs {
		err := s.deleteItem(ctx, s.ids, azcosmos.NewPartitionKeyString(d.PK), d.ID)
		if err != nil && !isStatus(err, http.StatusNotFound) {
			return err
		}
	}
	return s.dropAborted(ctx, recipient, res)
}

// dropAborted drops an aborted save's reservation and records the positions
// it took as holes in the catalog entries, in one batch: readers may skip
// them from the moment the watermark passes them, and only because they are
// recorded.
func (s *Store) dropAborted(ctx context.Context, recipient string, res reservation) error {
	pk := azcosmos.NewPartitionKeyString(recipient)
	for attempt := 0; ; attempt++ {
		h, err := s.readHead(ctx, pk)
		if err != nil {
			return err
		}
		version := h.ETag
		if !dropReservation(&h, res.Save, h.Next-1) {
			return nil
		}
		b := s.recipients.NewTransactionalBatch(pk)
		h.ETag = ""
		if err := batchWrite(&b, h, version); err != nil {
			return err
		}
		for _, r := range res.Ranges {
			item, err := s.readItem(ctx, s.recipients, pk, entryID(r.key()), "")
			if isStatus(err, http.StatusNotFound) {
				continue // never written: the reservation failed
			}
			if err != nil {
				return err
			}
			var d entryDoc
			if err := json.Unmarshal(item.Value, &d); err != nil {
				return err
			}
			e := toEntry(d)
			e.AddHole(r.Start, r.End)
			if err := batchWrite(&b, fromEntry(recipient, e), e.Version); err != nil {
				return err
			}
		}
		err = s.execute(ctx, s.recipients, b)
		if !errors.Is(err, repository.ErrConflict) {
			return err
		}
		if !pause(ctx, attempt) {
			return ctx.Err()
		}
	}
}

func (s *Store) hasExpired(h headDoc) bool {
	now := s.cfg.Now().UnixMilli()
	return slices.ContainsFunc(h.Reservations, func(r reservation) bool { return r.Expires < now })
}

// resolveExpired settles the reservations of saves that outlived their
// lease: finalized when committed, else aborted and rolled back.
func (s *Store) resolveExpired(ctx context.Context, recipient string) error {
	item, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), headID, "")
	if err != nil {
		return err
	}
	var h headDoc
	if err := json.Unmarshal(item.Value, &h); err != nil {
		return err
	}
	now := s.cfg.Now().UnixMilli()
	for _, res := range h.Reservations {
		if res.Expires >= now {
			continue
		}
		state, err := s.settle(ctx, res.Save, res.Token)
		if err != nil {
			return err
		}
		s.cfg.Logger.Warn("cosmos: settling an expired save", "recipient", recipient, "save", res.Save, "state", state)
		if state == stateCommitted {
			err = s.updateHead(ctx, recipient, func(h *headDoc) bool { return dropReservation(h, res.Save, h.Next-1) })
		} else {
			err = s.rollback(ctx, recipient, res)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// settle returns a save's final state, aborting it if it is still pending.
func (s *Store) settle(ctx context.Context, saveID, token string) (string, error) {
	pk := azcosmos.NewPartitionKeyString(saveID)
	item, err := s.readItem(ctx, s.saves, pk, saveID, token)
	if isStatus(err, http.StatusNotFound) {
		return stateAborted, nil
	}
	if err != nil {
		return "", err
	}
	var d saveDoc
	if err := json.Unmarshal(item.Value, &d); err != nil {
		return "", err
	}
	if d.State != statePending {
		return d.State, nil
	}
	version := d.ETag
	d.State, d.ETag = stateAborted, ""
	_, err = s.saves.ReplaceItem(ctx, pk, saveID, mustJSON(d), &azcosmos.ItemOptions{IfMatchEtag: etag(version)})
	if isStatus(err, http.StatusPreconditionFailed) {
		return s.settle(ctx, saveID, token) // it committed or was aborted meanwhile
	}
	return stateAborted, err
}

// readOnPrimary reads one item in a transactional batch, which Cosmos DB
// runs on the primary replica: the answer reflects every write that
// succeeded. found is false when the item does not exist.
func (s *Store) readOnPrimary(ctx context.Context, c *azcosmos.ContainerClient, pk, id string, into any) (found bool, err error) {
	b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
	b.ReadItem(id, nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return false, err
	}
	s.tokens.note(c.ID(), resp.SessionToken)
	if len(resp.OperationResults) != 1 {
		return false, fmt.Errorf("cosmos: read of %s answered %d results", id, len(resp.OperationResults))
	}
	op := resp.OperationResults[0]
	switch {
	case op.StatusCode == http.StatusNotFound:
		return false, nil
	case op.StatusCode >= 300:
		return false, fmt.Errorf("cosmos: read of %s answered %d", id, op.StatusCode)
	}
	return true, json.Unmarshal(op.ResourceBody, into)
}

func (s *Store) readSaveOnPrimary(ctx context.Context, saveID string) (saveDoc, error) {
	var d saveDoc
	found, err := s.readOnPrimary(ctx, s.saves, saveID, saveID, &d)
	if err == nil && !found {
		d.State = stateAborted
	}
	return d, err
}

func mustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cosmos: marshal %T: %v", v, err))
	}
	return raw
}
