package pebble

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/groupcommit"
)

// Every conditional write (a group of saves, a new bundle, a dequeue, a
// sweep) is an operation run by one writer goroutine, through a group-commit
// pipeline (internal/groupcommit). It takes all the operations queued, runs
// each against the state the groups before it left, applies the group to
// pebble as one batch and goes on to the next group while the WAL is
// synced. Only after the fsync are the new control records published to
// readers and the callers answered. Pebble shows a batch to its own reads
// before the fsync, which is why readers go through the published records
// (records.go), or wait for the groups' fsyncs (durable.go): nothing is
// visible to them before it is durable.

// maxWriteGroup bounds how many operations share one batch.
const maxWriteGroup = 256

// writeOp checks its preconditions against tx and, if they hold, records its
// changes in tx. It must change nothing in tx when it returns an error.
type writeOp func(tx *txn) error

type writeReq struct {
	op   writeOp
	done chan error // told once the group is durable (or failed)
}

// write queues op and waits for its group to be durable. Once queued, the
// outcome is always awaited: the caller never sees an error for a write
// that happened.
func (s *Store) write(ctx context.Context, op writeOp) error {
	if s.readOnly {
		return s.refusal
	}
	req := writeReq{op: op, done: make(chan error, 1)}
	if err := s.writer.Submit(ctx, req); errors.Is(err, groupcommit.ErrClosed) {
		return errStoreClosed
	} else if err != nil {
		return err
	}
	return <-req.done
}

var errStoreClosed = errors.New("embedded: store closed")

// applyGroup runs the group's operations and applies the batch without
// waiting for its fsync; the function it returns waits for it, publishes
// and answers, while the writer goes on to the next group.
func (s *Store) applyGroup(group []writeReq) func() {
	if s.applyErr != nil {
		answer(group, make([]error, len(group)), s.applyErr)
		return nil
	}
	s.unsynced.settle(s.durability.last())
	tx := &txn{
		s:        s,
		batch:    s.db.NewBatch(),
		touched:  map[[16]byte]*records{},
		ids:      map[[16]byte][]byte{},
		dequeued: map[string]bool{},
	}
	errs := make([]error, len(group))
	ok := 0
	for i, req := range group {
		if errs[i] = req.op(tx); errs[i] == nil {
			ok++
		}
	}
	if ok == 0 {
		// Every operation failed its checks, perhaps against groups not yet
		// durable: answered in order, after those.
		tx.batch.Close()
		return func() { answer(group, errs, s.syncErr) }
	}
	tx.writeBatch()
	seq := s.durability.begin()
	if err := applyBatch(s.db, tx.batch); err != nil {
		_ = tx.batch.SyncWait() // pebble requires it before Close; returns at once when nothing was queued
		tx.batch.Close()
		// Pebble refuses a batch only when it is in a state this store
		// cannot reason about (closed, or its disk failing): no later
		// group is applied either, until the hub is restarted.
		s.applyErr = fmt.Errorf("embedded: applying a write group: %w; restart the hub", err)
		s.logger.Error("the embedded store cannot apply writes; restart the hub", "err", err)
		s.durability.failed(s.applyErr)
		answer(group, errs, s.applyErr)
		return nil
	}
	s.ids.change(tx.newIDs, tx.goneIDs)
	s.unsynced.add(seq, tx.touched)
	return func() {
		err := syncBatch(tx.batch)
		tx.batch.Close()
		// A group applied after one whose fsync failed was built on it: it
		// fails too, and so does every later one (the store must be reopened).
		if s.syncErr == nil && err != nil {
			s.syncErr = fmt.Errorf("embedded: sync of the write-ahead log: %w", err)
			s.logger.Error("the embedded store cannot make writes durable; restart the hub", "err", err)
		}
		if s.syncErr == nil {
			s.publish(tx.touched)
			s.durability.reached(seq)
		} else {
			s.durability.failed(s.syncErr)
		}
		answer(group, errs, s.syncErr)
	}
}

// applyBatch applies a group's batch to pebble without waiting for its
// fsync (a variable for tests, which make it fail).
var applyBatch = func(db *pebble.DB, b *pebble.Batch) error { return db.ApplyNoSyncWait(b, pebble.Sync) }

// syncBatch waits for an applied group's fsync (a variable for tests, which
// make it fail).
var syncBatch = (*pebble.Batch).SyncWait

// answer tells every request its outcome: groupErr when set (the group,
// or one it was checked against, is not durable: its own checks may have
// read what never became durable, such as an id "already stored"), else
// its own error.
func answer(group []writeReq, errs []error, groupErr error) {
	for i, req := range group {
		req.done <- cmp.Or(groupErr, errs[i])
	}
}

// publish makes a durable group's control records what readers see, and
// lets go of its pins.
func (s *Store) publish(touched map[[16]byte]*records) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for r, rec := range touched {
		rec.used.Store(true)
		s.cache[r] = rec
		if s.pinned[r]--; s.pinned[r] == 0 {
			delete(s.pinned, r)
		}
	}
}
