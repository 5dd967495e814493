package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
)

// Bells carry a save through one instance to the peeks waiting on another.
// After a group commit the hub rings: one small document in the bells
// container naming the group's recipients, which expires after bellTTL.
// The store rings too when it makes notifications visible outside a commit
// (ringRevealed). Every instance follows that container's change feed
// (latest version mode, pull model, its continuation token kept in memory)
// and wakes its own waiting peeks for the recipients it reads. The
// container holds nothing but bells, so a poll that finds nothing new reads
// nothing: one request per partition key range, however many peeks wait.
// See docs/cosmos.md, "Waiting peeks".
const (
	// bellTTL (seconds) keeps a bell long enough for every instance to read
	// it (they poll about twice a second) and bounds what an instance that
	// starts reads before it is at the present.
	bellTTL = 60
	// maxBellRecipients bounds one bell document: 500 recipients of at most
	// 64 characters are about 35 KB. A group with more rings several.
	maxBellRecipients = 500
	// revealRingTimeout bounds the ring of a settle or rollback that made
	// notifications visible (ringRevealed), which its caller waits for.
	revealRingTimeout = 10 * time.Second
)

// bells writes and reads the bells container.
type bells struct {
	feed *azcosmos.ContainerClient
	// instance is written into the bells this process's hub rings, so
	// that its own reader skips them: its saves woke its waiting peeks
	// already.
	instance string
}

func newBells(client *azcosmos.Client, database string) (*bells, error) {
	feed, err := client.NewContainer(database, containerBells)
	if err != nil {
		return nil, err
	}
	return &bells{feed: feed, instance: uuid.NewString()}, nil
}

// bellDoc is a bell: `by` the instance that rang it (empty for the store's
// own, ringRevealed), `r` the recipients.
type bellDoc struct {
	ID  string   `json:"id"`
	PK  string   `json:"pk"`
	By  string   `json:"by"`
	R   []string `json:"r"`
	TTL int      `json:"ttl"`
}

// RingBell implements store.Coordination: one create of a bell per
// maxBellRecipients recipients, its errors mapped.
func (s *Store) RingBell(ctx context.Context, recipients []string) error {
	return storeError(s.bells.ring(ctx, recipients, s.bells.instance))
}

// ringRevealed rings the bell for recipients whose notifications became
// visible outside a commit: the settle of a save whose process died, or the
// rollback of a failed save that held other saves back. No hub rings for
// those (the settler's load is no save; a failed Save rings nothing), so
// the store does, naming no instance: every instance reads the bell, this
// one too, whose waiters no save woke either. A ring that fails only
// delays the peeks waiting for these recipients, to the end of their wait.
func (s *Store) ringRevealed(ctx context.Context, recipients []string) {
	if len(recipients) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revealRingTimeout)
	defer cancel()
	if err := s.bells.ring(ctx, recipients, ""); err != nil {
		s.cfg.Logger.Warn("cosmos: ringing the bell for notifications a settle or rollback made visible failed: peeks waiting on other instances find them at their next look",
			"recipients", len(recipients), "err", err)
	}
}

// ReadBells implements store.Coordination: the change feed of the bells
// container from cursor on (the SDK's continuation token), its errors
// mapped.
func (s *Store) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	recipients, next, err := s.bells.read(ctx, cursor)
	return recipients, next, storeError(err)
}

// ring creates the bells for recipients, rung by the instance by ("": by
// none, read by every instance).
func (b *bells) ring(ctx context.Context, recipients []string, by string) error {
	for part := range slices.Chunk(recipients, maxBellRecipients) {
		id := uuid.NewString()
		body, err := json.Marshal(bellDoc{ID: id, PK: id, By: by, R: part, TTL: bellTTL})
		if err != nil {
			return err
		}
		_, err = b.feed.CreateItem(ctx, azcosmos.NewPartitionKeyString(id), body, nil)
		// 409: a retry of a create whose answer was lost; the bell exists.
		if err != nil && !isStatus(err, http.StatusConflict) {
			return fmt.Errorf("cosmos: ring a bell for %d recipients: %w", len(part), err)
		}
	}
	return nil
}

// read returns the recipients of other instances' bells after cursor, at
// most maxFeedPages pages of them, and the cursor after them. The empty
// cursor reads the whole feed (the bells of the last bellTTL) to find the
// present, and returns none of them. On an error it returns what it read
// before it, with the cursor after that.
func (b *bells) read(ctx context.Context, cursor string) ([]string, string, error) {
	var recipients []string
	seen := make(map[string]struct{})
	cursor, _, err := followFeed(ctx, b.feed, cursor, nil, func(docs [][]byte, _ string) error {
		for _, item := range docs {
			var bell bellDoc
			if err := json.Unmarshal(item, &bell); err != nil || bell.By == b.instance {
				continue
			}
			for _, r := range bell.R {
				if _, ok := seen[r]; !ok {
					seen[r] = struct{}{}
					recipients = append(recipients, r)
				}
			}
		}
		return nil
	})
	if err != nil {
		return recipients, cursor, fmt.Errorf("cosmos: read the bells: %w", err)
	}
	return recipients, cursor, nil
}
