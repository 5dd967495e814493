package cosmos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
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
// Steps 1 to 4 overlap wherever nothing depends on the order (write): a
// save's critical path is a few round trips however many recipients it has.
//
// A failure before 5 rolls back: the record is marked aborted, what was
// written is deleted, the reservations are dropped, their numbers and
// positions stay unused. A save that dies is found by whoever next loads the
// recipient after its lease: a committed one is finalized, any other aborted
// and rolled back.

// MaxCabinetsPerSave bounds the cabinets (a recipient's notifications of one
// domain and content type) one save writes: each costs a catalog entry in
// the reservation and a page, so the largest valid Save must finish within
// the hub's 30 s on an account at the default throughput, with room to
// spare. Measured on the test server at 1,000 RU/s: 1,000 cabinets of
// 255-character types took 29 s, 500 took 22 s on a busy machine
// (TestASaveOfTheMostCabinetsFinishes logs the time of 250). A larger Save
// is refused with a clear error; the hub splits a group of several Saves
// before that happens.
const MaxCabinetsPerSave = 250

// commitSaves writes a group of saves with the protocol above.
func (s *Store) commitSaves(ctx context.Context, saves []store.RecipientSave) error {
	cabinets := 0
	for _, sv := range saves {
		cabinets += len(sv.Entries)
	}
	if cabinets > MaxCabinetsPerSave {
		return fmt.Errorf("%w: %w: on Cosmos DB a save writes at most %d cabinets (a recipient's notifications of one domain and content type), this one %d: send it in smaller saves",
			store.ErrTooLarge, domain.ErrInvalidArgument, MaxCabinetsPerSave, cabinets)
	}
	saveID := uuid.NewString()
	lease := s.leaseFor(ctx)
	expires := s.cfg.Now().Add(lease).UnixMilli()
	plans := make([]savePlan, len(saves))
	for i, sv := range saves {
		p, err := s.plan(saveID, expires, sv)
		if err != nil {
			return err
		}
		plans[i] = p
	}
	layout, err := s.layout(ctx)
	if err != nil {
		return err
	}
	ids := idWrites(saveID, layout, plans)
	record := saveDoc{ID: saveID, PK: saveID, State: statePending, TTL: int32(s.cfg.Retention.Seconds())}

	// The save decides (commits or fails) within half its lease: the other
	// half is the margin over the requests still in flight at the deadline
	// and over the instances' clocks, which compare the lease's end.
	wctx, cancel := context.WithTimeout(ctx, lease/2)
	defer cancel()
	leaseEnd := time.Now().Add(lease)
	w, err := s.write(wctx, record, plans, ids)
	if w.version == "" {
		// No commit record: nothing was reserved.
		return err
	}
	version, reserved, pagesToken := w.version, w.reserved, w.pagesToken
	if err == nil {
		// Committed records do not expire: they vouch for the ids as long as
		// the data is kept, and retention deletes them with the last id
		// document of their save (idrelease.go).
		record.State, record.TTL, record.DrawersToken = stateCommitted, -1, pagesToken
		var resp azcosmos.ItemResponse
		resp, err = s.saves.ReplaceItem(wctx, azcosmos.NewPartitionKeyString(saveID), saveID, mustJSON(record),
			&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
		if err == nil && resp.SessionToken != nil {
			s.tokens.note(containerSaves, *resp.SessionToken)
		}
		if isStatus(err, http.StatusPreconditionFailed) {
			// A replay of our own commit after a lost answer, or our lease
			// ran out and someone aborted the save: the record says which.
			// A read that fails says neither: the outcome is unknown, never
			// a refusal the hub would replan as if nothing was written (the
			// abort below asks the primary again).
			switch d, rerr := s.readSaveOnPrimary(ctx, saveID); {
			case rerr != nil:
				err = fmt.Errorf("%w: %w", errOutcomeUnknown, rerr)
			case d.State == stateCommitted:
				err = nil
			default:
				err = fmt.Errorf("%w: save %s was aborted", store.ErrConflict, saveID)
			}
		}
	}
	if err != nil {
		// The abort is best effort: an unfinished one is completed by
		// whoever finds the expired reservations. A save whose commit
		// applied (its answer lost, or late past the deadline) is
		// committed: it is finalized and succeeds.
		record.State, record.TTL, record.DrawersToken = statePending, int32(s.cfg.Retention.Seconds()), ""
		// It runs without the caller's deadline, but not past the lease:
		// from then on whoever finds the reservation settles it, and on an
		// account that stops answering the SDK's retries would hold the
		// Save for as long as they go on.
		actx, acancel := context.WithDeadline(context.WithoutCancel(ctx), leaseEnd)
		committed, unsettled := s.abort(actx, record, version, reserved)
		acancel()
		if !committed {
			return tooLarge(failedFor(err, w.failed, unsettled, len(plans)))
		}
		s.cfg.Logger.Warn("cosmos: a save whose commit seemed to fail is committed; finalizing it", "save", saveID, "err", err)
	}
	// Committed is final: the save succeeded whatever happens next, so
	// finalizing is retried until done, without depending on the caller
	// still waiting. Should it fail for longer than finalizeFor, whoever
	// loads the recipient after the lease finalizes it.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), s.finalizeFor)
	defer fcancel()
	for attempt := 0; ; attempt++ {
		err := s.finalizeAll(fctx, saveID, plans, pagesToken)
		if err == nil {
			return nil
		}
		s.cfg.Logger.Warn("cosmos: finalizing a committed save failed; retrying", "save", saveID, "attempt", attempt+1, "err", err)
		if !pause(fctx, attempt) {
			s.cfg.Logger.Error("cosmos: committed save not finalized; its lease will", "save", saveID, "err", err)
			return nil
		}
	}
}

// failedFor is err, a save that failed before its commit was sent, as the
// failure of the recipients whose own requests failed it, when there are
// such and others: nothing of the save will show, and a save of the others
// alone may succeed. The recipients whose reservation the abort left in
// their head (unsettled) are named too: until their lease ends that
// reservation holds their watermark, and a save stored meanwhile would not
// be visible when acknowledged.
func failedFor(err error, failed, unsettled []string, recipients int) error {
	if len(failed) == 0 {
		return err
	}
	named := slices.Concat(failed, slices.DeleteFunc(slices.Clone(unsettled), func(r string) bool { return slices.Contains(failed, r) }))
	if len(named) >= recipients {
		return err
	}
	return &store.RecipientsFailedError{Recipients: named, Err: err}
}

// tooLarge marks the answers Cosmos DB gives a request beyond its limits:
// 413 for a request or document over 2 MB, 400 for a batch of more than 100
// operations or a query over 512 KB (a 400 is never worth repeating).
func tooLarge(err error) error {
	if isStatus(err, http.StatusRequestEntityTooLarge) || isStatus(err, http.StatusBadRequest) {
		return fmt.Errorf("%w: %w", store.ErrTooLarge, err)
	}
	return err
}

// finalizeFor bounds the retries of a committed save's finalize.
const finalizeFor = 10 * time.Minute

// savePlan is one recipient's part of a save as documents.
type savePlan struct {
	save  store.RecipientSave
	res   reservation
	pages []pageDoc
	// chunks are the reserve batches: chunks[0]'s detail is res's own,
	// later ones go into part documents.
	chunks []resChunk
	// head is the recipient's head as the save's reservation left it: the
	// finalize replaces it on its etag without reading it first.
	head headDoc
	// reservedOn is the head version the first reserve batch was sent on
	// ("": it creates the head), for the rollback (fenceHead).
	reservedOn string
}

func (s *Store) plan(saveID string, expires int64, sv store.RecipientSave) (savePlan, error) {
	p := savePlan{save: sv, res: reservation{Save: saveID, Expires: expires}}
	for _, pg := range sv.Pages {
		doc, err := encodePage(pg)
		if err != nil {
			return p, err
		}
		doc.Save = saveID // retention finds the save's id documents through it
		p.pages = append(p.pages, doc)
	}
	p.chunks = reserveChunks(sv, p.pages)
	// The save's id documents (idWrites) are listed in the head's part:
	// at most one per bucket.
	p.res.resDetail = p.chunks[0].detail
	return p, nil
}

// written is what the steps before the commit wrote.
type written struct {
	version    string     // the commit record's etag; empty when it was not created
	reserved   []savePlan // the plans that may hold a reservation, for the abort
	pagesToken string     // the merged session token of the page batches
	// failed are the recipients whose own requests failed the write (not
	// cancelled for another's failure or the deadline).
	failed []string
}

// write runs steps 1 to 4 with every step started as soon as what it
// depends on is done, so that the critical path is a few round trips
// however many recipients the save has:
//
//   - the commit record is created while each recipient's head is read
//     again (or the recipient registered);
//   - a recipient is reserved once the record exists (its reservation
//     carries the record's session token), and its pages are written as
//     soon as its own reservation holds: they go nowhere but to positions
//     it took;
//   - the id documents are written once every reservation holds (each
//     reservation lists the documents holding its recipient's ids, so a
//     rollback or a settler finds them all), and the ids are looked up
//     again right after them, while pages are still being written.
//
// On the first failure the rest is cancelled. A write cancelled in flight
// may have applied: its reservation counts as held, and the rollback reads
// on the primary what exists.
func (s *Store) write(ctx context.Context, record saveDoc, plans []savePlan, ids []idWrite) (written, error) {
	var w written
	g, gctx := errgroup.WithContext(ctx)
	created := make(chan struct{})
	g.Go(func() error {
		resp, err := s.saves.CreateItem(gctx, azcosmos.NewPartitionKeyString(record.ID), mustJSON(record), nil)
		if err != nil {
			return err
		}
		w.version = string(resp.ETag)
		// Whoever reads the record because of what this save wrote reads it
		// with its token: a lagging replica's 404 is no abort.
		if resp.SessionToken != nil {
			s.tokens.note(containerSaves, *resp.SessionToken)
			for i := range plans {
				plans[i].res.Token = *resp.SessionToken
			}
			for j := range ids {
				ids[j].doc.Token = *resp.SessionToken
			}
		}
		close(created)
		return nil
	})
	held := make([]bool, len(plans))
	reserved := make([]chan struct{}, len(plans))
	var mu sync.Mutex
	var tokens []string
	for i := range plans {
		reserved[i] = make(chan struct{})
		g.Go(func() error {
			err := s.writeRecipient(gctx, &plans[i], created, reserved[i], &held[i], func(pagesTokens []string) {
				mu.Lock()
				tokens = append(tokens, pagesTokens...)
				mu.Unlock()
			})
			if err != nil && gctx.Err() == nil {
				mu.Lock()
				w.failed = append(w.failed, plans[i].save.Recipient)
				mu.Unlock()
			}
			return err
		})
	}
	g.Go(func() error {
		for _, r := range reserved {
			if !wait(gctx, r) {
				return gctx.Err()
			}
		}
		if err := s.writeIDs(gctx, ids); err != nil {
			return err
		}
		return s.checkIDs(gctx, record.ID, plans)
	})
	err := g.Wait()
	for i, h := range held {
		if h {
			w.reserved = append(w.reserved, plans[i])
		}
	}
	w.pagesToken = mergeTokens(tokens...)
	return w, err
}

// writeRecipient is one recipient's part of write: its head, once the
// commit record is created its reservation (held says it may exist, and
// reserved is closed once it does), then its pages, whose batches' session
// tokens go to pages.
func (s *Store) writeRecipient(ctx context.Context, p *savePlan, created <-chan struct{}, reserved chan<- struct{}, held *bool, pages func([]string)) error {
	head, err := s.headToReserve(ctx, p.save)
	if err != nil {
		return err
	}
	if !wait(ctx, created) {
		return ctx.Err()
	}
	if *held, err = s.reserve(ctx, p, head); err != nil {
		return err
	}
	close(reserved)
	pagesTokens, err := s.writePlanPages(ctx, *p)
	pages(pagesTokens)
	return err
}

// wait waits for done to be closed; false when ctx ends first.
func wait(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// writePlanPages writes a recipient's pages, batched per drawer, all at
// once, and returns the batches' session tokens.
func (s *Store) writePlanPages(ctx context.Context, p savePlan) ([]string, error) {
	byDrawer := map[string][]pageDoc{}
	for _, pg := range p.pages {
		byDrawer[pg.PK] = append(byDrawer[pg.PK], pg)
	}
	var mu sync.Mutex
	var tokens []string
	g, ctx := errgroup.WithContext(ctx)
	for drawerID, pages := range byDrawer {
		for _, chunk := range pageBatches(pages) {
			g.Go(func() error {
				token, err := s.writePages(ctx, drawerID, chunk)
				mu.Lock()
				tokens = append(tokens, token)
				mu.Unlock()
				return err
			})
		}
	}
	err := g.Wait()
	return tokens, err
}

// writeIDs writes the save's id documents, all at once.
func (s *Store) writeIDs(ctx context.Context, ids []idWrite) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, w := range ids {
		g.Go(func() error {
			resp, err := s.ids.CreateItem(ctx, azcosmos.NewPartitionKeyString(w.bucket), mustJSON(w.doc), nil)
			if isStatus(err, http.StatusConflict) {
				// Its id is this save's: our own, from a replay whose first
				// answer was lost, and with it the token the look-up must
				// read with (else a lagging replica may miss an id document
				// another save wrote before ours). A read on the primary
				// gives it.
				_, err = s.readOnPrimary(ctx, s.ids, w.bucket, w.doc.ID, &idDoc{})
				return err
			}
			if err == nil && resp.SessionToken != nil {
				// The lookup after writing must see every id document
				// written before this one: it reads with this token.
				s.tokens.note(containerIDs, *resp.SessionToken)
			}
			return err
		})
	}
	return g.Wait()
}

// writePages creates a batch of a drawer's pages. Only a 409 says a page
// exists, and only a replay of this very batch (its first answer lost)
// can have written it, as the save alone holds these positions: the pages
// are read back on the primary and must be exactly the ones meant. A 404,
// 412 or 449, or a lost answer, says nothing was written, or nothing
// known: the save fails.
func (s *Store) writePages(ctx context.Context, drawerID string, chunk []pageBatchItem) (string, error) {
	b := s.drawers.NewTransactionalBatch(azcosmos.NewPartitionKeyString(drawerID))
	for _, it := range chunk {
		b.CreateItem(it.raw, nil)
	}
	resp, err := s.drawers.ExecuteTransactionalBatch(ctx, b, nil)
	if err == nil {
		s.tokens.note(containerDrawers, resp.SessionToken)
	}
	if err == nil && resp.Success {
		for _, it := range chunk {
			s.pages.wrote(drawerID, it.start, it.end)
		}
	}
	if err != nil || resp.Success {
		return resp.SessionToken, batchError(resp, err)
	}
	exists := slices.ContainsFunc(resp.OperationResults, func(r azcosmos.TransactionalBatchResult) bool {
		return r.StatusCode == http.StatusConflict
	}) && !slices.ContainsFunc(resp.OperationResults, func(r azcosmos.TransactionalBatchResult) bool {
		return r.StatusCode != http.StatusConflict && r.StatusCode != http.StatusFailedDependency
	})
	if !exists {
		return resp.SessionToken, batchError(resp, nil)
	}
	want := map[string][]byte{}
	var pageIDs []string
	for _, it := range chunk {
		want[it.id] = it.raw
		pageIDs = append(pageIDs, it.id)
	}
	err = s.readManyOnPrimary(ctx, s.drawers, drawerID, pageIDs, func(raw []byte) error {
		var got pageDoc
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		if !bytes.Equal(mustJSON(got), want[got.ID]) {
			return fmt.Errorf("cosmos: page %s of drawer %s holds other items than save %s wrote", got.ID, drawerID, got.Save)
		}
		delete(want, got.ID)
		return nil
	})
	if err == nil && len(want) > 0 {
		// Answered 409 and then not found: it was deleted meanwhile (a
		// rollback of this save by a settler).
		err = fmt.Errorf("%w: pages of drawer %s answered 409 and are gone", store.ErrConflict, drawerID)
	}
	// The failed batch ran on the primary: its token covers the pages found.
	return resp.SessionToken, err
}

// Cosmos DB refuses a request over 2 MB and a batch of more than 100
// operations; page batches keep a margin below both.
const (
	maxBatchBytes = 1_500_000
	maxPageOps    = 50
)

// pageBatches groups a drawer's pages, as JSON, into batches within the
// request limits; a page is never split (drawer.PageSize bounds it).
func pageBatches(pages []pageDoc) [][]pageBatchItem {
	var out [][]pageBatchItem
	var cur []pageBatchItem
	size := 0
	for _, pg := range pages {
		raw := mustJSON(pg)
		if len(cur) > 0 && (size+len(raw) > maxBatchBytes || len(cur) >= maxPageOps) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, pageBatchItem{id: pg.ID, raw: raw, start: pg.Start, end: pg.End})
		size += len(raw)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// pageBatchItem is a page as a batch sends it.
type pageBatchItem struct {
	id         string
	raw        []byte
	start, end int64 // its positions, [start, end)
}

// finalizeAll drops the reservation from every head, moving the watermarks.
// The head keeps the pages' session token, for readers on any instance.
func (s *Store) finalizeAll(ctx context.Context, saveID string, plans []savePlan, pagesToken string) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, p := range plans {
		g.Go(func() error {
			written, err := s.updateHeadFrom(ctx, p.save.Recipient, p.head, func(h *headDoc) bool {
				if !dropReservation(h, saveID, p.save.Head.Watermark) {
					return false
				}
				h.DrawersToken = mergeTokens(h.DrawersToken, pagesToken)
				return true
			})
			if written.ETag != "" {
				// Written on the head the reservation left: the catalog
				// that went with it goes with this one (knownCatalogs).
				s.heads.keep(p.save.Recipient, written)
				s.catalogs.advance(p.save.Recipient, p.head.ETag, written.ETag, nil)
			} else {
				s.catalogs.forget(p.save.Recipient)
			}
			if err == nil && len(p.chunks) > 1 {
				// Only rollbacks read the parts; left behind they cost
				// storage, not correctness.
				if derr := s.deleteParts(ctx, p.save.Recipient, saveID, len(p.chunks)-1); derr != nil {
					s.cfg.Logger.Warn("cosmos: reservation parts left behind", "save", saveID, "err", derr)
				}
			}
			return err
		})
	}
	return g.Wait()
}

func mustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cosmos: marshal %T: %v", v, err))
	}
	return raw
}

// leaseFor is the lease of a save made with ctx: the configured one, or
// twice the time ctx leaves when its caller allows more than half of it (a
// large Save on a slow account), so that the save may use that time and
// the margin stays.
func (s *Store) leaseFor(ctx context.Context) time.Duration {
	lease := s.cfg.Lease
	if deadline, ok := ctx.Deadline(); ok {
		lease = max(lease, 2*time.Until(deadline))
	}
	return lease
}
