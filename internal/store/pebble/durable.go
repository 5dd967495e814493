package pebble

import (
	"context"
	"sync"
)

// Pebble shows a write group to every read once the group is applied,
// before its fsync ends (writer.go). Reads of the control records go
// through the published records (records.go), which hold only durable
// groups; a read that goes to pebble itself and whose answer the hub
// tells someone must not answer from a group that a failed fsync or a
// power loss then undoes: it waits, after reading, until every group
// applied before it waited is durable (settled).

// durability numbers the write groups applied to pebble and says which of
// them are durable: groups become durable in the order they were applied.
type durability struct {
	mu      sync.Mutex
	applied uint64        // the last group applied, or being applied
	durable uint64        // the last group durable
	err     error         // why no group after durable will be
	changed chan struct{} // closed when durable or err changes; nil: nobody waits
}

// begin numbers a group about to be applied. It is counted before pebble
// shows it, so a read that finds the group finds it counted.
func (d *durability) begin() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied++
	return d.applied
}

// reached records that group seq, and every one before it, is durable.
func (d *durability) reached(seq uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.durable = seq
	d.wake()
}

// failed records that no group after the last durable one will be durable.
func (d *durability) failed(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.err = err
		d.wake()
	}
}

// last returns the last group durable.
func (d *durability) last() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.durable
}

func (d *durability) wake() {
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

// settled returns once every group applied before the call is durable, at
// once when none is in flight; else with the error that keeps one from
// being durable, or ctx's.
func (d *durability) settled(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	target := d.applied
	for d.durable < target {
		if d.err != nil {
			return d.err
		}
		if d.changed == nil {
			d.changed = make(chan struct{})
		}
		changed := d.changed
		d.mu.Unlock()
		select {
		case <-changed:
			d.mu.Lock()
		case <-ctx.Done():
			d.mu.Lock()
			return ctx.Err()
		}
	}
	return nil
}
