package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/repository"
)

// Reservations and recovery: how a save takes its sequence numbers and
// positions on a recipient's head and catalog entries, gives them back when
// it fails, and how whoever finds an expired reservation settles it.

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
