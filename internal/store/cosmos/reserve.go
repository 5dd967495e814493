package cosmos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Reservations and recovery: how a save takes its sequence numbers and
// positions on a recipient's head and catalog entries, gives them back when
// it fails, and how whoever finds an expired reservation settles it.

// takenRanges are the positions a save takes in each cabinet: the tail of
// each entry it writes, as long as the items it files there.
func takenRanges(sv store.RecipientSave) map[catalog.Key]posRange {
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
	out := map[catalog.Key]posRange{}
	for _, e := range sv.Entries {
		if n := taken[e.Key()]; n > 0 {
			out[e.Key()] = posRange{Origin: int32(e.Origin), CT: e.ContentType, Start: e.Total - n, End: e.Total}
		}
	}
	return out
}

// A reserve batch holds the head, a part document and the entries of one
// chunk with the shelves they fill (maxReserveEntries operations
// in all): within Cosmos DB's 100 operations and far below its 2 MB. The
// first chunk's detail lives in the head, which every reader loads, so it
// is kept small; later chunks' details go into part documents.
const (
	maxReserveEntries     = maxBatchOps - 2
	maxReserveEntryBytes  = 1_000_000
	maxHeadDetailBytes    = 32 << 10
	maxPartDetailBytes    = 512 << 10
	approxDetailItemBytes = 8 // separators and brackets per listed item
)

// resChunk is the entries one reserve batch writes, the shelves the save
// fills in their cabinets, and what the save takes and writes there.
type resChunk struct {
	entries []catalog.Entry
	shelves []shelfDoc
	detail  resDetail
}

// reserveChunks splits a recipient's save into reserve batches, each within
// the request limits however many cabinets the save touches.
func reserveChunks(sv store.RecipientSave, pages []pageDoc) []resChunk {
	ranges := takenRanges(sv)
	cabinetOf := map[string]catalog.Key{}
	for _, e := range sv.Entries {
		for _, d := range e.Drawers {
			cabinetOf[d.ID] = e.Key()
		}
	}
	pagesOf := map[catalog.Key][]pageRef{}
	for _, pg := range pages {
		k := cabinetOf[pg.PK]
		pagesOf[k] = append(pagesOf[k], pageRef{Drawer: pg.PK, ID: pg.ID})
	}
	chunks := []resChunk{{}}
	ops, entryBytes, detailBytes := 0, 0, 0
	for _, e := range sv.Entries {
		k := e.Key()
		var d resDetail
		d.Pages = pagesOf[k]
		doc, shelves := fromEntry(sv.Recipient, e)
		if r, ok := ranges[k]; ok {
			d.Ranges = []posRange{r}
			if e.Version != "" {
				shelves = shelvesFilledFrom(e, shelves, r.Start)
			}
		} else if e.Version != "" {
			shelves = nil // no position taken here: no drawer opens
		}
		eb := len(mustJSON(doc))
		for _, sh := range shelves {
			eb += len(mustJSON(sh))
		}
		db := len(mustJSON(d)) + approxDetailItemBytes
		limit := maxPartDetailBytes
		if len(chunks) == 1 {
			limit = maxHeadDetailBytes
		}
		cur := &chunks[len(chunks)-1]
		if len(cur.entries) > 0 && (ops+1+len(shelves) > maxReserveEntries ||
			entryBytes+eb > maxReserveEntryBytes || detailBytes+db > limit) {
			chunks = append(chunks, resChunk{})
			cur = &chunks[len(chunks)-1]
			ops, entryBytes, detailBytes = 0, 0, 0
		}
		cur.entries = append(cur.entries, e)
		cur.shelves = append(cur.shelves, shelves...)
		ops += 1 + len(shelves)
		cur.detail.Pages = append(cur.detail.Pages, d.Pages...)
		cur.detail.Ranges = append(cur.detail.Ranges, d.Ranges...)
		entryBytes += eb
		detailBytes += db
	}
	return chunks
}

// Parallel bounds the recipients a hub over this store loads at once when
// it plans a save group (hub.Options.PlanParallel): each load waits for
// round trips, so a group's recipients are all loaded at once. A save
// writes at most MaxCabinetsPerSave cabinets, so that many recipients, and
// reserves them all at once: the SDK's HTTP client does not cap the
// requests in flight (docs/cosmos.md, "Latency").
const Parallel = MaxCabinetsPerSave

// headToReserve returns the head a recipient's reservation is written on:
// the head the save was planned on, as the load kept it (knownHeads) or
// read again whole (the plan knows only its version), or a new one for a recipient not seen before, which is
// registered first so that every head is listed in the registry. It writes
// nothing else, so it runs while the save's commit record is created.
func (s *Store) headToReserve(ctx context.Context, sv store.RecipientSave) (headDoc, error) {
	head := headDoc{ID: headID, PK: sv.Recipient, T: typeHead}
	if sv.Head.Version == "" {
		return head, s.register(ctx, sv.Recipient)
	}
	if known, ok := s.heads.get(sv.Recipient, sv.Head.Version); ok {
		return known, nil // the head the plan's load read: no read again
	}
	item, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(sv.Recipient), headID, "")
	if err != nil {
		return head, err
	}
	if err := json.Unmarshal(item.Value, &head); err != nil {
		return head, err
	}
	if head.ETag != sv.Head.Version {
		return head, fmt.Errorf("%w: head of %s changed", store.ErrConflict, sv.Recipient)
	}
	return head, nil
}

// reserve takes the save's sequence numbers on head (from headToReserve)
// and its positions in the catalog entries, chunk by chunk. The first batch
// writes the reservation; each later one rewrites the head with one more
// part in the same batch as the entries that part lists, so whoever rolls
// back finds exactly the positions taken. held says a reservation may
// exist. p.head becomes the head as written, for the finalize.
func (s *Store) reserve(ctx context.Context, p *savePlan, head headDoc) (held bool, err error) {
	sv := p.save
	res := p.res
	p.reservedOn = head.ETag
	// The watermark stays where it is until the save is finalized.
	res.From, res.To = max(head.Next, 1), sv.Head.NextSeq-1
	head.Next = sv.Head.NextSeq
	head.Reservations = append(head.Reservations, res)
	p.res = res
	head, err = s.reserveBatch(ctx, sv.Recipient, head, res.Save, p.chunks[0], 0)
	p.head = head
	if err != nil {
		// Only a refusal (a changed head or entry: 404, 409, 412) says the
		// batch did not apply; after any other failure the reservation may
		// exist, and the rollback, which reads the head on the primary,
		// finds out.
		return !errors.Is(err, store.ErrConflict), err
	}
	for k := 1; k < len(p.chunks); k++ {
		if head, err = s.reservePart(ctx, sv.Recipient, head, res.Save, p.chunks[k], k); err != nil {
			return true, err
		}
		p.head = head
	}
	p.head = head
	return true, nil
}

// reservePart writes chunk k (≥ 1): the head with the save's part count
// raised to k, part k and the chunk's entries. A head changed meanwhile (by
// other saves' reservations or finalizes) is reread and the batch tried
// again; a changed entry fails the save. It returns the head as written.
func (s *Store) reservePart(ctx context.Context, recipient string, head headDoc, saveID string, c resChunk, k int) (headDoc, error) {
	for attempt := 0; ; attempt++ {
		i := slices.IndexFunc(head.Reservations, func(r reservation) bool { return r.Save == saveID })
		if i < 0 {
			// Our lease ran out and someone rolled the save back.
			return head, fmt.Errorf("%w: reservation of save %s was rolled back", store.ErrConflict, saveID)
		}
		if head.Reservations[i].Parts >= k {
			return head, nil // a replay of this batch whose answer was lost
		}
		head.Reservations = slices.Clone(head.Reservations)
		head.Reservations[i].Parts = k
		written, err := s.reserveBatch(ctx, recipient, head, saveID, c, k)
		if err == nil {
			return written, nil
		}
		if !errors.Is(err, errHeadChanged) {
			return head, err
		}
		if !pause(ctx, attempt) {
			return head, ctx.Err()
		}
		head = headDoc{}
		found, err := s.readOnPrimary(ctx, s.recipients, recipient, headID, &head)
		if err != nil {
			return head, err
		}
		if !found {
			return head, fmt.Errorf("%w: head of %s is gone", store.ErrConflict, recipient)
		}
	}
}

// errHeadChanged is a reserve batch that failed on the head's etag alone.
var errHeadChanged = fmt.Errorf("%w: head changed", store.ErrConflict)

// reserveBatch writes the head (on its etag, or as new), part k of saveID's
// reservation when k > 0, and the chunk's entries on theirs, in one batch.
// It returns the head as it now is.
func (s *Store) reserveBatch(ctx context.Context, recipient string, head headDoc, saveID string, c resChunk, k int) (headDoc, error) {
	b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
	version := head.ETag
	head.ETag = ""
	if err := batchWrite(&b, head, version); err != nil {
		return head, err
	}
	if k > 0 {
		part := resPartDoc{ID: resPartID(saveID, k), PK: recipient, T: typeResPart, Save: saveID, resDetail: c.detail}
		if err := batchCreate(&b, part); err != nil {
			return head, err
		}
	}
	for _, e := range c.entries {
		doc, _ := fromEntry(recipient, e)
		if err := batchWrite(&b, doc, e.Version); err != nil {
			return head, err
		}
	}
	for _, d := range c.shelves {
		b.UpsertItem(mustJSON(d), nil)
	}
	resp, err := s.recipients.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !resp.Success {
		s.catalogs.forget(recipient)
	}
	if err == nil {
		s.tokens.note(s.recipients.ID(), resp.SessionToken)
		if resp.Success && len(resp.OperationResults) > 0 {
			head.ETag = string(resp.OperationResults[0].ETag)
			if k == 0 && len(c.shelves) == 0 && len(resp.OperationResults) == 1+len(c.entries) {
				written := cloneEntries(c.entries)
				for i := range written {
					written[i].Version = string(resp.OperationResults[1+i].ETag)
				}
				s.catalogs.advance(recipient, version, head.ETag, written)
			} else {
				s.catalogs.forget(recipient)
			}
			return head, nil
		}
	}
	// Only the head failed (the others answer 424, failed dependency):
	// another save moved it; the entries are still ours to write.
	headOnly := err == nil && k > 0 && len(resp.OperationResults) > 0 &&
		resp.OperationResults[0].StatusCode == http.StatusPreconditionFailed &&
		!slices.ContainsFunc(resp.OperationResults[1:], func(r azcosmos.TransactionalBatchResult) bool {
			return r.StatusCode != http.StatusFailedDependency
		})
	err = batchError(resp, err)
	if errors.Is(err, store.ErrConflict) {
		// A replay of our own batch after a lost answer finds its own
		// effect: the head holds our reservation, with this part.
		var now headDoc
		ours, rerr := s.ownReplay(ctx, s.recipients, recipient, headID, &now, func() bool {
			return slices.ContainsFunc(now.Reservations, func(r reservation) bool { return r.Save == saveID && r.Parts >= k })
		})
		switch {
		case rerr != nil:
			return head, rerr // may be held: the rollback reads the head
		case ours:
			return now, nil
		}
	}
	if headOnly {
		return head, errHeadChanged
	}
	return head, err
}

// register records a new recipient in the registry partition.
func (s *Store) register(ctx context.Context, recipient string) error {
	doc := map[string]string{"id": recipient, "pk": registryPartition, "t": typeRegistry}
	resp, err := s.recipients.CreateItem(ctx, azcosmos.NewPartitionKeyString(registryPartition), mustJSON(doc), nil)
	if err == nil && resp.SessionToken != nil {
		// The registry's partition may be in another partition key range
		// than anything else this instance wrote: without its token, a
		// look at the registry here may not see the recipient yet.
		s.tokens.note(containerRecipients, *resp.SessionToken)
	}
	if err != nil && !isStatus(err, http.StatusConflict) {
		return err
	}
	return nil
}

// dropReservation removes a save's reservation and moves the watermark as
// far as outstanding reservations allow, up to the highest watermark a
// finished save asked for (limit: a save may hold it back). That need not be
// this save's: one that finished while an earlier save was still being
// written could not move the watermark then, so its wish is kept in the head
// for whichever save finishes last.
func dropReservation(h *headDoc, saveID string, limit int64) bool {
	i := slices.IndexFunc(h.Reservations, func(r reservation) bool { return r.Save == saveID })
	if i < 0 {
		return false
	}
	h.Reservations = slices.Delete(h.Reservations, i, i+1)
	h.Wanted = max(h.Wanted, limit)
	h.Watermark = max(h.Watermark, min(h.watermark(), h.Wanted))
	return true
}

// readHead reads the recipient's head on the primary; its ETag is the
// version read. A replace of the head refused with 412 may be this
// process's own resend meeting its first attempt's effect, whose answer
// (and session token) was lost: a replica may not have that write yet, and
// a head read there would be refused again, round after round.
func (s *Store) readHead(ctx context.Context, recipient string) (headDoc, error) {
	var h headDoc
	found, err := s.readOnPrimary(ctx, s.recipients, recipient, headID, &h)
	if err == nil && !found {
		err = fmt.Errorf("%w: head of %s is gone", store.ErrConflict, recipient)
	}
	return h, err
}

// updateHead applies change to the recipient's head with optimistic
// concurrency, rereading after a lost race. change reports whether there is
// anything to write.
func (s *Store) updateHead(ctx context.Context, recipient string, change func(*headDoc) bool) error {
	_, err := s.updateHeadFrom(ctx, recipient, headDoc{}, change)
	return err
}

// updateHeadFrom is updateHead starting from known, a version of the head
// this process wrote (its ETag set), without reading it first: when no one
// changed the head since, that saves a round trip; when someone did, the
// replace on known's etag is refused and the head is read as usual. onKnown
// is the head as written when the replace applied on known's version (its
// ETag the new one), else the zero head.
func (s *Store) updateHeadFrom(ctx context.Context, recipient string, known headDoc, change func(*headDoc) bool) (onKnown headDoc, err error) {
	pk := azcosmos.NewPartitionKeyString(recipient)
	for attempt := 0; ; attempt++ {
		h := known
		// change may edit the reservations in place: known stays as it was.
		h.Reservations = slices.Clone(known.Reservations)
		if attempt > 0 || h.ETag == "" {
			var err error
			if h, err = s.readHead(ctx, recipient); err != nil {
				return headDoc{}, err
			}
		}
		version := h.ETag
		if !change(&h) {
			return headDoc{}, nil
		}
		h.ETag = ""
		resp, err := s.recipients.ReplaceItem(ctx, pk, headID, mustJSON(h), &azcosmos.ItemOptions{IfMatchEtag: etag(version)})
		if err == nil && resp.SessionToken != nil {
			// This instance's loads see its own writes (store.MayLag).
			s.tokens.note(containerRecipients, *resp.SessionToken)
		}
		if err == nil && attempt == 0 && known.ETag != "" && version == known.ETag {
			h.ETag = string(resp.ETag)
			return h, nil
		}
		if !isStatus(err, http.StatusPreconditionFailed) {
			return headDoc{}, err
		}
		if (attempt > 0 || known.ETag == "") && !pause(ctx, attempt) {
			return headDoc{}, ctx.Err()
		}
	}
}

// abort marks the save aborted and undoes what it reserved and wrote. It
// reports true when the save turns out committed: its own commit applied
// though its answer was lost (or came after the deadline), so the save
// must be finalized, never rolled back. Otherwise unsettled names the
// recipients whose reservation it may have left in their head, for its
// lease to settle.
func (s *Store) abort(ctx context.Context, record saveDoc, version string, plans []savePlan) (committed bool, unsettled []string) {
	all := func() []string {
		out := make([]string, len(plans))
		for i, p := range plans {
			out[i] = p.save.Recipient
		}
		return out
	}
	record.State = stateAborted
	resp, err := s.saves.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(record.ID), record.ID, mustJSON(record),
		&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
	if err == nil && resp.SessionToken != nil {
		s.tokens.note(containerSaves, *resp.SessionToken)
	}
	if err != nil {
		// A 412 says the record changed since the save created it: its
		// commit applied, or a settler aborted it. Any other failure
		// leaves the abort's own outcome unknown. The primary says which.
		d, rerr := s.readSaveOnPrimary(ctx, record.ID)
		switch {
		case rerr != nil:
			s.cfg.Logger.Warn("cosmos: could not abort save; its lease will", "save", record.ID, "err", err, "read", rerr)
			return false, all()
		case d.State == stateCommitted:
			return true, nil
		case d.State != stateAborted:
			s.cfg.Logger.Warn("cosmos: could not abort save; its lease will", "save", record.ID, "err", err)
			return false, all()
		}
	}
	// A rollback that releases the saves its reservation held back makes
	// their notifications visible through a failed Save, for which no hub
	// rings: the store does.
	var revealed []string
	// A save's id documents hold the ids of all its recipients, one per
	// bucket, and each reservation lists those holding its own: each is
	// deleted by the first rollback that lists it, not again by every
	// other (at 64 buckets, a save over 250 recipients would send some
	// 8,700 deletes one after the other, past the hub's deadline).
	idDocsGone := map[docRef]bool{}
	for _, p := range plans {
		var planned []resDetail
		for _, c := range p.chunks {
			planned = append(planned, c.detail)
		}
		shown, err := s.rollback(ctx, p.save.Recipient, record.ID, planned, &p.reservedOn, idDocsGone)
		if err != nil {
			s.cfg.Logger.Warn("cosmos: rollback incomplete; its lease will finish it", "save", record.ID, "err", err)
			unsettled = append(unsettled, p.save.Recipient)
		}
		if shown {
			revealed = append(revealed, p.save.Recipient)
		}
	}
	s.ringRevealed(ctx, revealed)
	return false, unsettled
}

// rollback deletes what an aborted save wrote for the recipient, records
// the positions its reservation holds as holes and drops it. planned is
// what the save meant to write (empty for a settler, who reads the head and
// the parts): deleting what was never written is harmless. fence is the
// head version the save's own reserve batch was sent on (nil for a
// settler): a head without the reservation is fenced against that batch
// before the rollback counts it as not written (fenceHead). revealed says
// that dropping the reservation made other saves' notifications visible
// (dropAborted), also when a later step failed. idDocsGone holds the id
// documents of the save that an earlier rollback of its other recipients
// deleted, and takes those this one deletes (nil: none known).
func (s *Store) rollback(ctx context.Context, recipient, saveID string, planned []resDetail, fence *string, idDocsGone map[docRef]bool) (revealed bool, err error) {
	s.catalogs.forget(recipient)
	var head headDoc
	i := -1
	for attempt := 0; ; attempt++ {
		head = headDoc{}
		found, err := s.readOnPrimary(ctx, s.recipients, recipient, headID, &head)
		if err != nil {
			return false, err
		}
		if found {
			i = slices.IndexFunc(head.Reservations, func(r reservation) bool { return r.Save == saveID })
		}
		if i >= 0 || fence == nil {
			break
		}
		fenced, err := s.fenceHead(ctx, recipient, head, found, *fence)
		if err != nil {
			return false, err
		}
		if fenced {
			break
		}
		if !pause(ctx, attempt) {
			return false, ctx.Err()
		}
	}
	if i < 0 {
		return false, s.deleteWritten(ctx, saveID, planned, idDocsGone)
	}
	res := head.Reservations[i]
	parts, err := s.readParts(ctx, recipient, saveID, 1, res.Parts)
	if err != nil {
		return false, err
	}
	// Holes of the parts first, then the head's own in the batch that
	// drops the reservation: the watermark passes no position before it is
	// recorded.
	given, err := s.givePartsBack(ctx, recipient, parts)
	if err != nil {
		return false, err
	}
	written := slices.Concat(planned, []resDetail{res.resDetail}, given)
	if revealed, err = s.dropAborted(ctx, recipient, saveID, res.Parts); err != nil {
		return revealed, err
	}
	// What the save wrote goes last: readers skip its positions from the
	// moment they are recorded holes, so the recipient does not wait for
	// the drawers to take deletes. Pages left behind by a delete that
	// fails are removed with their drawer by retention.
	return revealed, s.deleteWritten(ctx, saveID, written, idDocsGone)
}

// fenceHead makes sure that a reserve batch sent on the head's version
// ("": a batch creating the head) can no longer apply, once a read on the
// primary showed the head without its reservation: a batch whose answer
// never came (a deadline, a cut connection) may still be on its way, and
// applied behind the rollback it would leave a reservation of an aborted
// save holding the recipient's watermark until its lease ends
// (TestAReserveBatchArrivingAfterItsSavesRollbackHoldsNothing). A head
// still at that version is written again as it is (a head still missing
// is created as a new recipient's would be), which changes its version; a
// head at another version refuses the batch already. It reports false when
// the head changed meanwhile: the batch may have applied, and the head is
// read again.
func (s *Store) fenceHead(ctx context.Context, recipient string, head headDoc, found bool, version string) (bool, error) {
	pk := azcosmos.NewPartitionKeyString(recipient)
	var resp azcosmos.ItemResponse
	var err error
	switch {
	case found && head.ETag == version:
		head.ETag = ""
		resp, err = s.recipients.ReplaceItem(ctx, pk, headID, mustJSON(head), &azcosmos.ItemOptions{IfMatchEtag: etag(version)})
	case !found && version == "":
		// As a recipient without a head is: next sequence number 1,
		// nothing waiting, marked idle.
		resp, err = s.recipients.CreateItem(ctx, pk, mustJSON(headDoc{ID: headID, PK: recipient, T: typeHead, Next: 1, IdleAt: 1}), nil)
	default:
		return true, nil
	}
	if err == nil && resp.SessionToken != nil {
		s.tokens.note(containerRecipients, *resp.SessionToken)
	}
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusConflict) {
		return false, nil // the batch, or another writer, came first (or this write's resend met itself)
	}
	return err == nil, err
}

// deleteWritten deletes the pages and id documents of saveID the details
// list. A page is deleted only when the primary shows it written by saveID
// (its sv), on the etag read: positions a save planned but never reserved
// may hold another save's pages, and those are never touched. Id documents
// are named by the save's id, so they are its own; those in gone are
// deleted already, and those deleted here are added to it (when not nil).
func (s *Store) deleteWritten(ctx context.Context, saveID string, details []resDetail, gone map[docRef]bool) error {
	pages := map[string][]string{} // drawer → page ids
	idDocs := map[docRef]bool{}
	for _, d := range details {
		for _, pg := range d.Pages {
			if !slices.Contains(pages[pg.Drawer], pg.ID) {
				pages[pg.Drawer] = append(pages[pg.Drawer], pg.ID)
			}
		}
		for _, ix := range d.IDDocs {
			idDocs[ix] = true
		}
	}
	for _, drawerID := range slices.Sorted(maps.Keys(pages)) {
		type ownPage struct{ id, etag string }
		var own []ownPage
		err := s.readManyOnPrimary(ctx, s.drawers, drawerID, pages[drawerID], func(raw []byte) error {
			var pg struct {
				ID   string `json:"id"`
				Save string `json:"sv"`
				ETag string `json:"_etag"`
			}
			if err := json.Unmarshal(raw, &pg); err != nil {
				return err
			}
			if pg.Save == saveID {
				own = append(own, ownPage{pg.ID, pg.ETag})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, pg := range own {
			resp, err := s.drawers.DeleteItem(ctx, azcosmos.NewPartitionKeyString(drawerID), pg.id,
				&azcosmos.ItemOptions{IfMatchEtag: etag(pg.etag)})
			if err == nil && resp.SessionToken != nil {
				s.tokens.note(containerDrawers, *resp.SessionToken) // this process reads no deleted page again
			}
			if err != nil && !isStatus(err, http.StatusNotFound) && !isStatus(err, http.StatusPreconditionFailed) {
				return err
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(idDocs), func(a, b docRef) int {
		return cmp.Or(cmp.Compare(a.PK, b.PK), cmp.Compare(a.ID, b.ID))
	}) {
		if k.ID != saveID || gone[k] {
			continue // not this save's (never expected), or deleted already
		}
		err := s.deleteItem(ctx, s.ids, azcosmos.NewPartitionKeyString(k.PK), k.ID)
		if err != nil && !isStatus(err, http.StatusNotFound) {
			return err
		}
		if gone != nil {
			gone[k] = true
		}
	}
	return nil
}

// readParts reads parts from..to of a save's reservation on the primary: a
// lagging replica's 404 must not hide positions to give back. A part that
// does not exist was given back by a rollback already (givePartBack).
func (s *Store) readParts(ctx context.Context, recipient, saveID string, from, to int) ([]resPartDoc, error) {
	var ids []string
	for k := from; k <= to; k++ {
		ids = append(ids, resPartID(saveID, k))
	}
	var out []resPartDoc
	err := s.readManyOnPrimary(ctx, s.recipients, recipient, ids, func(raw []byte) error {
		var d resPartDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// deleteParts deletes a finished reservation's part documents.
func (s *Store) deleteParts(ctx context.Context, recipient, saveID string, n int) error {
	var ids []string
	for k := 1; k <= n; k++ {
		ids = append(ids, resPartID(saveID, k))
	}
	return s.deleteAll(ctx, s.recipients, recipient, ids)
}

// givePartsBack gives parts back one after another (givePartBack) and
// returns what they wrote, for deleteWritten.
func (s *Store) givePartsBack(ctx context.Context, recipient string, parts []resPartDoc) ([]resDetail, error) {
	var written []resDetail
	for _, part := range parts {
		if err := s.givePartBack(ctx, recipient, part); err != nil {
			return nil, err
		}
		written = append(written, part.resDetail)
	}
	return written, nil
}

// givePartBack records the positions a part of an aborted save's
// reservation took as holes in their catalog entries (replaced on the etags
// read on the primary), in the batch that deletes the part: a part is given
// back once. Its cabinets may hold nothing else, and retention takes a
// cabinet out once every run is acknowledged, so while the reservation
// stays (the batch that drops it failed, and a settler takes the rollback
// up after the lease) a save may start such a cabinet again at position 0:
// its positions recorded as holes a second time would hide its
// acknowledged notifications. A part's entries and shelves fit one batch
// (reserveChunks), with room for the delete.
func (s *Store) givePartBack(ctx context.Context, recipient string, part resPartDoc) error {
	for attempt := 0; ; attempt++ {
		b := s.recipients.NewTransactionalBatch(azcosmos.NewPartitionKeyString(recipient))
		if _, err := s.addHoles(ctx, &b, recipient, part.Ranges); err != nil {
			return err
		}
		b.DeleteItem(part.ID, nil)
		err := s.execute(ctx, s.recipients, b)
		if err == nil || !errors.Is(err, store.ErrConflict) {
			return err
		}
		// An entry changed since it was read, or the part is gone: another
		// rollback gave it back (or this batch did, its answer lost).
		found, err := s.readOnPrimary(ctx, s.recipients, recipient, part.ID, &resPartDoc{})
		if err != nil || !found {
			return err
		}
		if !pause(ctx, attempt) {
			return ctx.Err()
		}
	}
}

// addHoles adds to b the replaces of the entries of ranges with the ranges
// recorded as holes. Entries are read on the primary; one that does not
// exist there was never written (its reservation failed).
func (s *Store) addHoles(ctx context.Context, b *azcosmos.TransactionalBatch, recipient string, ranges []posRange) (int, error) {
	var ids []string
	for _, r := range ranges {
		ids = append(ids, entryID(r.key()))
	}
	entries := map[string]entryDoc{}
	err := s.readManyOnPrimary(ctx, s.recipients, recipient, ids, func(raw []byte) error {
		var d entryDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		entries[d.ID] = d
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, r := range ranges {
		if d, ok := entries[entryID(r.key())]; ok {
			d.Holes = addHole(d.Holes, r.Start, r.End)
			entries[d.ID] = d
		}
	}
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		d := entries[id]
		version := d.ETag
		d.ETag = ""
		if err := batchWrite(b, d, version); err != nil {
			return 0, err
		}
	}
	return len(entries), nil
}

// dropAborted drops an aborted save's reservation and records the positions
// of its first chunk as holes, in one batch: readers may skip them from the
// moment the watermark passes them, and only because they are recorded.
// Parts beyond partsDone (written by the save while a settler rolled it
// back) are given back first. revealed says that the drop made other saves'
// notifications visible (revealsOthers): also a drop whose answer was lost,
// which may have applied, and one found done when looked at again, which
// may have been this one.
func (s *Store) dropAborted(ctx context.Context, recipient, saveID string, partsDone int) (revealed bool, err error) {
	pk := azcosmos.NewPartitionKeyString(recipient)
	// shown is what a drop sent would show had it applied.
	shown := false
	for attempt := 0; ; attempt++ {
		var h headDoc
		found, err := s.readOnPrimary(ctx, s.recipients, recipient, headID, &h)
		if err != nil || !found {
			return shown, err
		}
		i := slices.IndexFunc(h.Reservations, func(r reservation) bool { return r.Save == saveID })
		if i < 0 {
			// Dropped by a drop of this rollback whose answer was lost, or
			// by another rollback, which rings for itself: one ring more
			// than needed costs a bell, one less leaves peeks waiting.
			return shown, nil
		}
		res := h.Reservations[i]
		if res.Parts > partsDone {
			parts, err := s.readParts(ctx, recipient, saveID, partsDone+1, res.Parts)
			if err != nil {
				return false, err
			}
			written, err := s.givePartsBack(ctx, recipient, parts)
			if err != nil {
				return false, err
			}
			if err := s.deleteWritten(ctx, saveID, written, nil); err != nil {
				s.cfg.Logger.Warn("cosmos: pages of an aborted save left to retention", "save", saveID, "err", err)
			}
			partsDone = res.Parts
			continue
		}
		version, was := h.ETag, h.Watermark
		dropReservation(&h, saveID, h.Next-1)
		b := s.recipients.NewTransactionalBatch(pk)
		h.ETag = ""
		if err := batchWrite(&b, h, version); err != nil {
			return false, err
		}
		if _, err := s.addHoles(ctx, &b, recipient, res.Ranges); err != nil {
			return false, err
		}
		err = s.execute(ctx, s.recipients, b)
		shown = shown || revealsOthers(was, h.Watermark, res)
		if err == nil {
			// Its parts went as they were given back (givePartBack).
			return revealsOthers(was, h.Watermark, res), nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return shown, err
		}
		if !pause(ctx, attempt) {
			return false, ctx.Err()
		}
	}
}

// revealsOthers says whether the watermark's move from was to now, as an
// aborted save's reservation res is dropped, passes sequence numbers of
// other saves: the aborted save's own are holes, and passing them alone
// shows nothing new (a Save refused for an id another save holds is rolled
// back so, and rings no bell).
func revealsOthers(was, now int64, res reservation) bool {
	return now > was && (res.From > was+1 || now > res.To)
}

// readManyOnPrimary reads items of one partition in transactional batches
// of reads, which run on the primary, and calls fn for each that exists.
func (s *Store) readManyOnPrimary(ctx context.Context, c *azcosmos.ContainerClient, pk string, ids []string, fn func([]byte) error) error {
	for len(ids) > 0 {
		n := min(len(ids), maxBatchOps)
		b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
		for _, id := range ids[:n] {
			b.ReadItem(id, nil)
		}
		resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return err
		}
		s.tokens.note(c.ID(), resp.SessionToken)
		// A batch stops at its first failed operation: a 404 fails the
		// rest with 424, so those are read again.
		var again []string
		for j, op := range resp.OperationResults {
			switch {
			case op.StatusCode == http.StatusNotFound:
			case op.StatusCode == http.StatusFailedDependency:
				again = append(again, ids[j])
			case op.StatusCode >= 300:
				return fmt.Errorf("cosmos: read of %s answered %d", ids[j], op.StatusCode)
			default:
				if err := fn(op.ResourceBody); err != nil {
					return err
				}
			}
		}
		ids = append(again, ids[n:]...)
	}
	return nil
}

func (s *Store) hasExpired(h headDoc) bool {
	now := s.cfg.Now().UnixMilli()
	return slices.ContainsFunc(h.Reservations, func(r reservation) bool { return r.Expires < now })
}

// heldFor is how long until the load of a recipient settles the first of
// the head's reservations to end (store.RecipientState.HeldFor):
// resolveExpired takes a reservation whose lease ended before now.
func (s *Store) heldFor(h headDoc) time.Duration {
	if len(h.Reservations) == 0 {
		return 0
	}
	first := slices.MinFunc(h.Reservations, func(a, b reservation) int { return cmp.Compare(a.Expires, b.Expires) })
	return time.Duration(max(first.Expires+1-s.cfg.Now().UnixMilli(), 1)) * time.Millisecond
}

// resolveExpired settles the reservations of saves that outlived their
// lease: finalized when committed, else aborted and rolled back. When that
// makes notifications visible it rings the recipient's bell, as the save's
// own finalize would have had the hub do: peeks waiting on any instance
// look again.
func (s *Store) resolveExpired(ctx context.Context, recipient string) error {
	item, err := s.readItem(ctx, s.recipients, azcosmos.NewPartitionKeyString(recipient), headID, "")
	if err != nil {
		return err
	}
	var h headDoc
	if err := json.Unmarshal(item.Value, &h); err != nil {
		return err
	}
	revealed := false
	defer func() {
		if revealed {
			s.ringRevealed(ctx, []string{recipient})
		}
	}()
	now := s.cfg.Now().UnixMilli()
	for _, res := range h.Reservations {
		if res.Expires >= now {
			continue
		}
		d, err := s.settle(ctx, res.Save)
		if err != nil {
			return err
		}
		s.cfg.Logger.Warn("cosmos: settling an expired save", "recipient", recipient, "save", res.Save, "state", d.State)
		shown := false
		if d.State == stateCommitted {
			err = s.updateHead(ctx, recipient, func(h *headDoc) bool {
				was := h.Watermark
				shown = false
				if !dropReservation(h, res.Save, h.Next-1) {
					return false
				}
				// Its pages are read with their token, which only the
				// record carries now (the save's finalize never came).
				h.DrawersToken = mergeTokens(h.DrawersToken, d.DrawersToken)
				shown = h.Watermark > was
				return true
			})
			if err == nil {
				err = s.deleteParts(ctx, recipient, res.Save, res.Parts)
			}
		} else {
			shown, err = s.rollback(ctx, recipient, res.Save, nil, nil, nil)
		}
		revealed = revealed || shown
		if err != nil {
			return err
		}
	}
	return nil
}

// settle returns a save's commit record in its final state, aborting it if
// it is still pending. The record is read on the primary: a replica's
// answer, even a 404, may predate the commit (a 404 with substatus 1002
// says no replica has caught up), and only the primary's decides between
// finalizing and rolling back.
func (s *Store) settle(ctx context.Context, saveID string) (saveDoc, error) {
	for attempt := 0; ; attempt++ {
		d, err := s.readSaveOnPrimary(ctx, saveID)
		if err != nil || d.State != statePending {
			return d, err
		}
		version := d.ETag
		d.State, d.ETag = stateAborted, ""
		resp, err := s.saves.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(saveID), saveID, mustJSON(d),
			&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
		if err == nil {
			if resp.SessionToken != nil {
				s.tokens.note(containerSaves, *resp.SessionToken)
			}
			return d, nil
		}
		// A 412: it committed or was aborted meanwhile; read again. Any
		// other failure leaves the abort's outcome unknown: whoever loads
		// the recipient next settles it again.
		if !isStatus(err, http.StatusPreconditionFailed) || !pause(ctx, attempt) {
			return saveDoc{}, err
		}
	}
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

// primaryToken returns the session token the primary of partition pk's
// range answers now, for a query of that partition to carry: it sees every
// write that succeeded there, whichever instance made it. A transactional
// batch runs on the primary; its one read asks for an id no document has
// (1 RU).
func (s *Store) primaryToken(ctx context.Context, c *azcosmos.ContainerClient, pk string) (string, error) {
	b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
	b.ReadItem(primaryTokenID, nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return "", err
	}
	if resp.SessionToken == "" {
		return "", fmt.Errorf("cosmos: a read of partition %s on the primary answered no session token", pk)
	}
	return resp.SessionToken, nil
}

// anchorOnPrimary has a query of partition pk carry the token its primary
// answers now (primaryToken), merged with the one it carries: it sees every
// write that succeeded there, whichever instance made it.
func (s *Store) anchorOnPrimary(ctx context.Context, c *azcosmos.ContainerClient, pk string, opts *azcosmos.QueryOptions) error {
	token, err := s.primaryToken(ctx, c, pk)
	if err != nil {
		return err
	}
	if opts.SessionToken != nil {
		token = mergeTokens(token, *opts.SessionToken)
	}
	opts.SessionToken = &token
	return nil
}

// primaryTokenID is the id primaryToken reads: no document is named so
// (the store's ids are GUIDs or carry a prefix).
const primaryTokenID = "~token"

// errOutcomeUnknown is a write whose outcome no one knows: it was refused
// as conflicting, which a resend meeting the first attempt's own effect
// also is, and the read on the primary that tells the two apart failed.
// It is unavailable, never a refusal: the write may have applied.
var errOutcomeUnknown = fmt.Errorf("%w: the outcome of a write is unknown", domain.ErrUnavailable)

// ownReplay reads id on the primary into into after a conditional write was
// refused, and reports whether the document holds the caller's own write
// (ours, looking at into): a resend after a lost answer refused by its
// first attempt's effect. A read that fails is errOutcomeUnknown.
func (s *Store) ownReplay(ctx context.Context, c *azcosmos.ContainerClient, pk, id string, into any, ours func() bool) (bool, error) {
	found, err := s.readOnPrimary(ctx, c, pk, id, into)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errOutcomeUnknown, err)
	}
	return found && ours(), nil
}

func (s *Store) readSaveOnPrimary(ctx context.Context, saveID string) (saveDoc, error) {
	var d saveDoc
	found, err := s.readOnPrimary(ctx, s.saves, saveID, saveID, &d)
	if err == nil && !found {
		d.State = stateAborted
	}
	return d, err
}
