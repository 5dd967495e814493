package cosmos

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
)

// A packed page reads back every item exactly, from any offset a query
// slices it at: items like the first, a gap in sequence numbers, another
// weight, flag or document type, an id that is not a canonical UUID.
func TestPackedPagesReadBackExactlyFromAnyOffset(t *testing.T) {
	items := []drawer.Item{
		{Pos: 100, Seq: 7, ID: uuid.NewString(), DocumentType: "rsm-014", SupportsBundling: true, Weight: 1},
		{Pos: 101, Seq: 8, ID: uuid.NewString(), DocumentType: "rsm-014", SupportsBundling: true, Weight: 1},
		{Pos: 102, Seq: 12, ID: uuid.NewString(), DocumentType: "rsm-014", SupportsBundling: true, Weight: 1},
		{Pos: 103, Seq: 13, ID: uuid.NewString(), DocumentType: "rsm-015", SupportsBundling: true, Weight: 1},
		{Pos: 104, Seq: 14, ID: uuid.NewString(), DocumentType: "rsm-014", SupportsBundling: false, Weight: 1},
		{Pos: 105, Seq: 15, ID: uuid.NewString(), DocumentType: "rsm-014", SupportsBundling: true, Weight: 2_147_483_647},
		{Pos: 106, Seq: 16, ID: "NOT-a-canonical-uuid", DocumentType: "rsm-014", SupportsBundling: true, Weight: 1},
		{Pos: 107, Seq: 17, ID: "ABCDEF01-2345-6789-abcd-ef0123456789", DocumentType: "", SupportsBundling: true, Weight: 1},
	}
	doc, err := encodePage(drawer.Page{DrawerID: "d", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(doc.X[0]); len(got) != 24 {
		t.Fatalf("an item like the first is packed as %s, want its id alone (22 characters)", got)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for off := range len(items) {
		var read pageDoc
		if err := json.Unmarshal(raw, &read); err != nil {
			t.Fatal(err)
		}
		read.X = read.X[off:] // as the drawer query slices it
		got, err := read.items(int64(off))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, items[off:]) {
			t.Fatalf("from offset %d read %+v, want %+v", off, got, items[off:])
		}
	}
}
