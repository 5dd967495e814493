package pebble_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/backend"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/internal/store/storetest"
)

// The suites run on the chain the binary opens (backend.Open), not on the
// bare store, so that no decorator can change what they check.
func TestContract(t *testing.T) {
	storetest.RunRepository(t, openChain)
}

// Each Store method keeps its promise, checked without the algorithm.
func TestStoreContract(t *testing.T) {
	storetest.RunStore(t, openChain)
}

// Retention's index and the backlog figures keep their promises.
func TestFiguresContract(t *testing.T) {
	storetest.RunFigures(t, openChain)
}

func openChain(t *testing.T) store.Store {
	s, err := backend.Open(context.Background(), backend.Config{Kind: backend.Pebble, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A notice is written with its dequeue, in the same atomic write: a dequeue
// that fails writes none, and none is written for a domain that gets no notices.
func TestNoticesAreWrittenWithTheirDequeueOnly(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{Notices: func(o domain.Origin) bool { return o == domain.OriginCharges }}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	recipient := uuid.NewString()
	for _, o := range []domain.Origin{domain.OriginCharges, domain.OriginAggregations} {
		n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: o, ContentType: "c", DocumentType: "c", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek: %v %v", b, err)
		}
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
		if err := repo.Dequeue(ctx, recipient, b.ID); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("a second dequeue: %v", err)
		}
	}
	notices, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(notices) != 1 || notices[0].Recipient != recipient {
		t.Fatalf("notices %+v (%v); want one, for the charges bundle", notices, err)
	}
	if err := s.RemoveNotices(ctx, notices); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.NoticeBacklog(ctx); err != nil || n != 0 {
		t.Fatalf("%d notices after removal (%v)", n, err)
	}
}

// A backup is a store of its own, opened on the directory it wrote.
func TestBackupContract(t *testing.T) {
	storetest.RunBackup(t, openChain, func(t *testing.T, dir string) store.Store {
		s, err := backend.Open(context.Background(), backend.Config{Kind: backend.Pebble, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
