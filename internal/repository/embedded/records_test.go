package embedded

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// openTemp opens a store in a temporary directory.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnknownRecipientsAreNotKeptInMemory(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	for range 100 {
		st, err := s.LoadRecipient(ctx, uuid.NewString())
		if err != nil || st.Head.Version != "" || len(st.Entries) != 0 {
			t.Fatalf("unknown recipient: %+v %v", st, err)
		}
	}
	if len(s.cache) != 0 {
		t.Fatalf("%d unknown recipients cached", len(s.cache))
	}
	known := uuid.NewString()
	if err := saveIDsFor(t, s, known, []string{uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadRecipient(ctx, known)
	if err != nil || st.Head.Version == "" {
		t.Fatalf("known recipient: %+v %v", st, err)
	}
	if len(s.cache) != 1 {
		t.Fatalf("%d recipients cached, want 1", len(s.cache))
	}
}
