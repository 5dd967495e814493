package auth

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// jwksFile is the key set a verifier trusts and what it knows of the file
// the keys came from.
type jwksFile struct {
	keys    *KeySet
	sum     [sha256.Size]byte // of the content the keys were parsed from
	checked time.Time         // the last look at the file
	// failed names the unusable state of the file logged last (its read
	// error or its content's sum), so that a file that stays bad is
	// logged and counted once, not at every look; empty when the file is
	// good.
	failed string
}

// reload takes what a read of the file at path gave (data, or readErr) and,
// if its content differs from the one the keys came from, installs its keys
// and returns the old ones (nil when the content is the same). The content is
// compared rather than the modification time or size, which a rewrite can
// leave as they were (coarse time stamps, a key of the same length). A file
// that cannot be read or parsed keeps the keys and returns the error and
// what names the failure; but a key it no longer lists goes (see
// stillListed), and then the old keys are returned with the error.
func (f *jwksFile) reload(path string, data []byte, readErr error, now time.Time) (old *KeySet, failure string, err error) {
	f.checked = now
	if readErr != nil {
		return nil, readErr.Error(), fmt.Errorf("read JWKS: %w", readErr)
	}
	sum := sha256.Sum256(data)
	if sum == f.sum {
		return nil, "", nil
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		if kept := f.keys.stillListed(data); kept != nil {
			// The good file's content is no longer what the keys are:
			// its return must install them again.
			old, f.keys, f.sum = f.keys, kept, [sha256.Size]byte{}
		}
		return old, string(sum[:]), fmt.Errorf("JWKS %s: %w", path, err)
	}
	old, f.keys, f.sum = f.keys, keys, sum
	return old, "", nil
}

// stillListed is the keys of ks that the JWKS document data, which the hub
// refuses, still lists (same kid, algorithm and key), when that is some of
// them but not all: the operator who edited the file took the others out,
// perhaps because they leaked, and a key of another algorithm added in the
// same edit must not keep them trusted. It is nil when data is no JSON
// document of keys (half written: nothing can be told from it), lists all
// of ks, or none of them (a file that names no key in use is taken for a
// mistake rather than a lock-out of every caller), and when ks is nil: the
// file's first read, with no keys in use yet.
func (ks *KeySet) stillListed(data []byte) *KeySet {
	if ks == nil {
		return nil
	}
	var doc struct {
		Keys []rawJWK `json:"keys"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	kept := &KeySet{}
	for _, k := range ks.keys {
		if slices.ContainsFunc(doc.Keys, func(raw rawJWK) bool {
			listed, err := parseJWK(raw)
			return err == nil && raw.Use != "enc" && listed.kid == k.kid && listed.alg == k.alg && equalKeys(listed.key, k.key)
		}) {
			kept.keys = append(kept.keys, k)
		}
	}
	if len(kept.keys) == 0 || len(kept.keys) == len(ks.keys) {
		return nil
	}
	return kept
}

// currentKeys is the keys a call checks its token with: those of the last
// look at the file, once a look that is due (the last one is CheckInterval
// old) or under way has ended, or once LookWait has passed since it began.
func (v *Verifier) currentKeys() *KeySet {
	v.mu.Lock()
	if v.looking == nil {
		if now := v.cfg.Now(); now.Sub(v.file.checked) >= CheckInterval {
			v.startLookLocked(now)
		}
	}
	looking, deadline := v.looking, v.lookDeadline
	v.mu.Unlock()
	if wait := time.Until(deadline); looking != nil && wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-looking:
		case <-timer.C:
			v.mu.Lock()
			v.slowLocked(looking)
			v.mu.Unlock()
		}
		timer.Stop()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.file.keys
}

// slowRead is what jwksFile.failed holds while a read of the file takes
// longer than LookWait.
const slowRead = "read taking longer than LookWait"

// slowLocked logs and counts, once, that the look under way (looking) is
// taking longer than LookWait, as for a file that cannot be read; its
// outcome is logged when it ends. v.mu is held.
func (v *Verifier) slowLocked(looking chan struct{}) {
	if v.looking != looking || v.file.failed == slowRead {
		return
	}
	v.file.failed = slowRead
	v.cfg.Logger.Warn("JWKS file not read within "+LookWait.String()+"; the keys of the last good one stay in use until the read ends",
		"file", v.cfg.JWKSFile)
	v.record(context.Background(), "error")
}

// startLookLocked reads the file on a goroutine of its own, which takes what
// it read (checkLocked) and closes v.looking when the read ends, whenever
// that is. v.mu is held.
func (v *Verifier) startLookLocked(now time.Time) {
	done := make(chan struct{})
	v.looking, v.lookDeadline = done, time.Now().Add(LookWait)
	go func() {
		data, err := os.ReadFile(v.cfg.JWKSFile) //nolint:gosec // the operator names the file
		v.mu.Lock()
		v.checkLocked(now, data, err)
		v.looking = nil
		v.mu.Unlock()
		close(done)
	}()
}

// checkLocked takes what a read of the file at now gave (data, or readErr)
// and logs and counts what changed: a reload at info with the key ids
// gained and lost, an unusable file at warn (once while it stays the
// same). v.mu is held.
func (v *Verifier) checkLocked(now time.Time, data []byte, readErr error) {
	wasFailing := v.file.failed != ""
	old, failure, err := v.file.reload(v.cfg.JWKSFile, data, readErr, now)
	ctx := context.Background()
	switch {
	case err != nil:
		if failure == v.file.failed && old == nil {
			return
		}
		v.file.failed = failure
		if old != nil {
			_, removed, _ := diffKeys(old, v.file.keys)
			v.cfg.Logger.Warn("JWKS file not reloaded; the keys of the last good one that it still lists stay in use",
				"file", v.cfg.JWKSFile, "error", err.Error(), "removed", removed)
		} else {
			v.cfg.Logger.Warn("JWKS file not reloaded; the keys of the last good one stay in use",
				"file", v.cfg.JWKSFile, "error", err.Error())
		}
		v.record(ctx, "error")
	case old == nil && !wasFailing:
		// Unchanged since the keys were loaded.
	default:
		// Changed, or back to the content of the keys in use after an
		// unusable version: either way the file is good again.
		v.file.failed = ""
		if old == nil {
			old = v.file.keys
		}
		added, removed, replaced := diffKeys(old, v.file.keys)
		v.cfg.Logger.Info("JWKS file reloaded", "file", v.cfg.JWKSFile, "keys", len(v.file.keys.keys),
			"added", added, "removed", removed, "replaced", replaced)
		v.record(ctx, "ok")
	}
}

func (v *Verifier) record(ctx context.Context, outcome string) {
	if v.cfg.Reloads != nil {
		v.cfg.Reloads.RecordJWKSReload(ctx, outcome)
	}
}

// diffKeys names the keys of next that old lacks (added), those of old that
// next lacks (removed) and those whose id stays with another key (replaced).
// A key is named by its kid, or "(no kid, ALG)" without one.
func diffKeys(old, next *KeySet) (added, removed, replaced []string) {
	added, removed, replaced = []string{}, []string{}, []string{}
	used := make([]bool, len(old.keys))
	// match pairs each key of next with an unused key of old of the same
	// name for which same holds.
	match := func(k jwk, same func(a, b jwk) bool) bool {
		for i, o := range old.keys {
			if !used[i] && o.name() == k.name() && same(o, k) {
				used[i] = true
				return true
			}
		}
		return false
	}
	var changed []jwk
	for _, k := range next.keys {
		if !match(k, func(a, b jwk) bool { return a.alg == b.alg && equalKeys(a.key, b.key) }) {
			changed = append(changed, k)
		}
	}
	for _, k := range changed {
		if match(k, func(jwk, jwk) bool { return true }) {
			replaced = append(replaced, k.name())
		} else {
			added = append(added, k.name())
		}
	}
	for i, o := range old.keys {
		if !used[i] {
			removed = append(removed, o.name())
		}
	}
	return added, removed, replaced
}

// name is how logs call the key.
func (k jwk) name() string {
	if k.kid != "" {
		return k.kid
	}
	return "(no kid, " + k.alg + ")"
}

func equalKeys(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// Watch looks at the JWKS file every CheckInterval until ctx is done, so
// that a change is logged and counted when it happens rather than at the
// next call. Calls look for themselves when a look is due (see
// currentKeys), so the bound on a removed key holds without Watch.
func (v *Verifier) Watch(ctx context.Context) {
	t := time.NewTicker(CheckInterval)
	defer t.Stop()
	v.watch(ctx, t.C)
}

func (v *Verifier) watch(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			v.mu.Lock()
			// A call may have looked since the last tick.
			if now := v.cfg.Now(); v.looking == nil && now.Sub(v.file.checked) >= CheckInterval {
				v.startLookLocked(now)
			}
			looking := v.looking
			v.mu.Unlock()
			if looking != nil {
				// The next tick is taken once this look has ended, or
				// never: a read that does not end holds no shutdown.
				select {
				case <-looking:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}
