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
	group, errs := queueWrites(s,
		func() error { return s.CommitSaves(context.Background(), []store.RecipientSave{save(1)}) },
		func() error { return s.CommitSaves(context.Background(), []store.RecipientSave{save(2)}) })
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

// queueWrites calls each of calls on a goroutine of its own, one after the
// other, with the writer swapped for one that only takes what they queue:
// it returns their writes, for the test to apply as one group
// (applyGroup) and to finish when it chooses, and their answers.
func queueWrites(s *Store, calls ...func() error) ([]writeReq, []chan error) {
	real := s.writer
	queued := make(chan writeReq, len(calls))
	s.writer = groupcommit.New(len(calls), groupcommit.Options[writeReq]{Prepare: func(g []writeReq) func() {
		for _, req := range g {
			queued <- req
		}
		return nil
	}})
	var group []writeReq
	errs := make([]chan error, len(calls))
	for i, call := range calls {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- call() }()
		group = append(group, <-queued)
	}
	s.writer.Close()
	s.writer = real
	return group, errs
}
