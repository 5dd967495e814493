package pebble

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

func readPage(t *testing.T, v []byte) []drawer.Item {
	t.Helper()
	var items []drawer.Item
	pr := newPageReader(v)
	for it, ok := pr.next(); ok; it, ok = pr.next() {
		items = append(items, it)
	}
	if pr.err != nil {
		t.Fatal(pr.err)
	}
	return items
}

// Every item a page may hold reads back as it was written: positions with
// gaps, sequence numbers that jump, the widest weight, many document types
// (past the few the encoder compares in turn) of the longest length.
func TestPagesReadBackEveryItem(t *testing.T) {
	long := strings.Repeat("x", domain.MaxContentTypeLength)
	var items []drawer.Item
	for i := range 1000 {
		items = append(items, drawer.Item{
			Pos: int64(5000 + i + i/100), Seq: int64(1 + 3*i), ID: uuid.NewString(),
			DocumentType:     fmt.Sprintf("%s%03d", long[:domain.MaxContentTypeLength-3], i%20),
			SupportsBundling: i%3 == 0, Weight: []int64{1, 7, domain.MaxWeight}[i%3],
		})
	}
	v, err := encodePage(items)
	if err != nil {
		t.Fatal(err)
	}
	if got := readPage(t, v); !reflect.DeepEqual(got, items) {
		t.Fatalf("read back %d items, first %+v; want %d, first %+v", len(got), got[0], len(items), items[0])
	}
}

// A page of one document type, the common case, takes about 20 bytes an
// item: the type is written once.
func TestAPageOfOneDocumentTypeIsSmall(t *testing.T) {
	items := make([]drawer.Item, drawer.PageSize)
	for i := range items {
		items[i] = drawer.Item{Pos: int64(i), Seq: int64(10 + i), ID: uuid.NewString(),
			DocumentType: "NotifyAggregatedMeasureData", SupportsBundling: true, Weight: 1}
	}
	v, err := encodePage(items)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(len(v)) / float64(len(items)); per > 21 {
		t.Fatalf("%.1f bytes an item, want at most 21", per)
	}
}

// A page cut short, of another format, or naming a document type it has not
// given, is corrupt.
func TestCorruptPagesAreRefused(t *testing.T) {
	v, err := encodePage([]drawer.Item{{Pos: 0, Seq: 1, ID: uuid.NewString(), DocumentType: "a", Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	bad[2+1+1+16] = 5 // the type reference: no type 5 in this page
	other := append([]byte{pageFormat + 1}, v[1:]...)
	for name, page := range map[string][]byte{"cut short": v[:len(v)-3], "unknown type": bad, "other format": other, "empty": nil} {
		pr := newPageReader(page)
		for _, ok := pr.next(); ok; _, ok = pr.next() {
		}
		if pr.err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
