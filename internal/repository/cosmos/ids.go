package cosmos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/repository"
)

// The id index: which notification ids are stored, by which save, with
// which fingerprint. Saves write it in step 3 and check it in step 4.

// idWrite is one id document to write, with the bucket it belongs to.
type idWrite struct {
	bucket string
	doc    idDoc
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

// idDoc indexes the ids of one save that fall in one bucket and one drawer.
type idDoc struct {
	ID     string    `json:"id"`
	PK     string    `json:"pk"`
	Drawer string    `json:"d"`
	Save   string    `json:"s"`
	Token  string    `json:"st,omitempty"` // session token of the save's commit record
	N      []idEntry `json:"n"`
}

type idEntry struct {
	ID          string `json:"i"`
	Fingerprint string `json:"f"`
}

// idHit is one row of the id lookup query.
type idHit struct {
	ID          string `json:"i"`
	Fingerprint string `json:"f"`
	Drawer      string `json:"d"`
	Save        string `json:"s"`
	Token       string `json:"st"`
}

func fingerprintString(fp repository.Fingerprint) string {
	return base64.RawURLEncoding.EncodeToString(fp[:])
}

func parseFingerprint(s string) (repository.Fingerprint, error) {
	var fp repository.Fingerprint
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(fp) {
		return fp, fmt.Errorf("corrupt fingerprint %q", s)
	}
	copy(fp[:], b)
	return fp, nil
}
