package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/groupcommit"
	"github.com/energydatahub/messagehub/internal/store"
)

// Two saves of one id with different content that share a write group: the
// second is refused with the record the first wrote, so that the hub tells
// a conflict from a duplicate by the stored content, not by its own. The
// binary writes one save group at a time to this store, so it only meets
// this through a caller that commits saves concurrently.
func TestAnIDSavedTwiceInOneGroupIsAnsweredWithTheFirstRecord(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	id := uuid.NewString()
	save := func(fp byte) store.RecipientSave {
		r, d := uuid.NewString(), uuid.NewString()
		return store.RecipientSave{
			Recipient: r, Head: store.Head{NextSeq: 2, Watermark: 1},
			Pages: []drawer.Page{{DrawerID: d, Items: []drawer.Item{{Pos: 0, Seq: 1, ID: id, DocumentType: "x", Weight: 1}}}},
			IDs:   []store.IDRecord{{ID: id, Fingerprint: store.Fingerprint{fp}, DrawerID: d}},
		}
	}
	// The writer's pipeline is swapped for one that only hands the queued
	// writes over, so that both land in the one group applied below.
	real := s.writer
	queued := make(chan writeReq, 2)
	s.writer = groupcommit.New(2, groupcommit.Options[writeReq]{Prepare: func(g []writeReq) func() {
		for _, req := range g {
			queued <- req
		}
		return nil
	}})
	errs := []chan error{make(chan error, 1), make(chan error, 1)}
	var group []writeReq
	for i, fp := range []byte{1, 2} {
		go func() { errs[i] <- s.CommitSaves(context.Background(), []store.RecipientSave{save(fp)}) }()
		group = append(group, <-queued)
	}
	s.writer.Close()
	s.writer = real
	s.applyGroup(group)()
	first, second := <-errs[0], <-errs[1]
	if first != nil {
		t.Fatalf("the first save: %v", first)
	}
	var exist *store.IDsExistError
	if !errors.As(second, &exist) {
		t.Fatalf("the second save: %v, want the id reported as stored", second)
	}
	if got := exist.Records[id].Fingerprint; got != (store.Fingerprint{1}) {
		t.Fatalf("the second save is told the id's fingerprint is %x, want the first save's", got)
	}
}
