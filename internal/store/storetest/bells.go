package storetest

import "testing"

// ownBellsAreNotRead: a store's reader is given the bells of the other
// instances sharing it, never its own (this instance's saves woke its
// peeks already); the empty cursor starts at the present, and a cursor can
// be read from again. A store one process opens has no others: its reads
// are always empty.
func ownBellsAreNotRead(t *testing.T, s *storeEnv) {
	r := newRecipient()
	got, cursor, err := s.store.ReadBells(ctx(t), "")
	if err != nil || len(got) != 0 {
		t.Fatalf("the first ReadBells: %v, %v; want no recipients", got, err)
	}
	if err := s.store.RingBell(ctx(t), []string{r, newRecipient()}); err != nil {
		t.Fatalf("RingBell: %v", err)
	}
	for range 2 {
		got, cursor, err = s.store.ReadBells(ctx(t), cursor)
		if err != nil || len(got) != 0 {
			t.Fatalf("ReadBells after this store rang: %v, %v; want none of its own recipients", got, err)
		}
	}
	if err := s.store.RingBell(ctx(t), nil); err != nil {
		t.Fatalf("RingBell of no recipients: %v", err)
	}
}
