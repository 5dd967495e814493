package cosmos

import "sync"

// knownHeads keeps the heads the last loads of recipients read, so that a
// save planned on a load reserves on the head that load saw instead of
// reading it again: the reserve batch replaces the head on the etag the plan
// was made at, so a head that changed since fails the batch exactly as a
// fresh read would have failed the save.
type knownHeads struct {
	mu sync.Mutex
	m  map[string]headDoc
}

// maxKnownHeads bounds the heads kept: a few hundred bytes each, and a
// recipient whose head was dropped is read again, which costs 1 RU.
const maxKnownHeads = 4096

// keep remembers h as the recipient's head. A head with reservations of
// saves in flight (up to 32 KB of detail each) is not kept but forgotten:
// the memory stays a few hundred bytes per head, and the save reads it.
func (k *knownHeads) keep(recipient string, h headDoc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]headDoc{}
	}
	if len(h.Reservations) > 0 {
		delete(k.m, recipient)
		return
	}
	if _, ok := k.m[recipient]; !ok && len(k.m) >= maxKnownHeads {
		for r := range k.m { // any one: map order is random
			delete(k.m, r)
			break
		}
	}
	k.m[recipient] = h
}

// get returns the recipient's head as last loaded, when that load saw the
// version asked for.
func (k *knownHeads) get(recipient, version string) (headDoc, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.m[recipient]
	if !ok || h.ETag != version {
		return headDoc{}, false
	}
	return h, true
}

// lastDoc returns the recipient's head as the last load or finalize of
// this instance left it, when it is kept.
func (k *knownHeads) lastDoc(recipient string) (headDoc, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.m[recipient]
	return h, ok
}

// last returns the version of the recipient's head the last load read,
// when it is kept.
func (k *knownHeads) last(recipient string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.m[recipient]
	return h.ETag, ok
}
