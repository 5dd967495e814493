package pebble

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// widestDrawer has every number at its widest.
func widestDrawer() drawer.Meta {
	return drawer.Meta{ID: uuid.NewString(), Start: math.MaxInt64, Count: math.MaxInt, FirstSeq: math.MinInt64,
		LastSeq: math.MaxInt64, FirstAt: math.MaxInt64, LastAt: math.MinInt64}
}

func testEntries() []catalog.Entry {
	many := make([]drawer.Meta, catalog.MaxDrawers)
	for i := range many {
		many[i] = drawer.Meta{ID: uuid.NewString(), Start: int64(i) * drawer.Capacity, Count: drawer.Capacity,
			FirstSeq: int64(i), LastSeq: int64(i) + 1, FirstAt: 1_763_950_000_000, LastAt: 1_763_950_000_001}
	}
	return []catalog.Entry{
		{},
		{Origin: domain.OriginTimeSeries, ContentType: "rsm-014", Version: "1a2b3c",
			Drawers: []drawer.Meta{{ID: uuid.NewString(), Start: 12_345, Count: 123, FirstSeq: 99_001, LastSeq: 99_124,
				FirstAt: 1_763_950_000_000, LastAt: 1_763_950_123_456}}, Total: 12_468},
		{Origin: math.MaxInt32, ContentType: strings.Repeat("é", 127) + "x", Drawers: []drawer.Meta{widestDrawer(), widestDrawer()},
			Total: math.MaxInt64, Version: strings.Repeat("z", 300)},
		{Origin: domain.OriginCharges, ContentType: "c", Drawers: many, Total: catalog.MaxDrawers * drawer.Capacity},
	}
}

func testHeads() []store.Head {
	return []store.Head{{}, {NextSeq: 12_469, Watermark: 12_468, Version: "3w5e11264sgsg"},
		{NextSeq: math.MaxInt64, Watermark: math.MinInt64, Version: strings.Repeat("v", 200)}}
}

// Heads, entries and drawer records read back exactly as written, from the
// empty ones to the widest the types allow.
func TestControlRecordsReadBackEveryField(t *testing.T) {
	for i, h := range testHeads() {
		if got, err := decodeHead(encodeHead(h)); err != nil || got != h {
			t.Errorf("head %d: read back %+v, %v; want %+v", i, got, err, h)
		}
	}
	for i, e := range testEntries() {
		v, err := encodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeEntry(v); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("entry %d: read back differs (%v)", i, err)
		}
	}
	for i, d := range []drawer.Meta{{ID: uuid.NewString()}, widestDrawer()} {
		v, err := encodeDrawerMeta(d)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeDrawerMeta(v); err != nil || got != d {
			t.Errorf("drawer %d: read back %+v, %v; want %+v", i, got, err, d)
		}
	}
}

// A record cut short anywhere, with bytes after its end, or in no known
// format (JSON among them), is refused as corrupt rather than read wrong.
func TestCorruptControlRecordsAreRefused(t *testing.T) {
	entry, err := encodeEntry(testEntries()[2])
	if err != nil {
		t.Fatal(err)
	}
	meta, err := encodeDrawerMeta(widestDrawer())
	if err != nil {
		t.Fatal(err)
	}
	decoders := map[string]struct {
		valid  []byte
		decode func([]byte) error
	}{
		"head":   {encodeHead(testHeads()[2]), func(v []byte) error { _, err := decodeHead(v); return err }},
		"entry":  {entry, func(v []byte) error { _, err := decodeEntry(v); return err }},
		"drawer": {meta, func(v []byte) error { _, err := decodeDrawerMeta(v); return err }},
	}
	for name, d := range decoders {
		for n := range len(d.valid) {
			if err := d.decode(d.valid[:n]); !errors.Is(err, errCorrupt) {
				t.Fatalf("%s cut to %d of %d bytes: %v, want corrupt", name, n, len(d.valid), err)
			}
		}
		if err := d.decode(append(d.valid[:len(d.valid):len(d.valid)], 0)); !errors.Is(err, errCorrupt) {
			t.Errorf("%s with a byte after its end: %v, want corrupt", name, err)
		}
		if err := d.decode(append([]byte{recordBinary + 1}, d.valid[1:]...)); !errors.Is(err, errCorrupt) {
			t.Errorf("%s in an unknown format: %v, want corrupt", name, err)
		}
		if err := d.decode([]byte(`{"Version":"1"}`)); !errors.Is(err, errCorrupt) {
			t.Errorf("%s in JSON: %v, want corrupt", name, err)
		}
	}
}

// A drawer id is stored as its 16 bytes, so only an id that reads back as
// the same string is accepted.
func TestADrawerIDMustBeACanonicalUUID(t *testing.T) {
	for _, id := range []string{"", "drawer-1", strings.ToUpper(uuid.NewString()), "urn:uuid:" + uuid.NewString()} {
		e := catalog.Entry{Drawers: []drawer.Meta{{ID: id}}}
		if _, err := encodeEntry(e); err == nil {
			t.Errorf("drawer id %q accepted", id)
		}
		if _, err := encodeDrawerMeta(drawer.Meta{ID: id}); err == nil {
			t.Errorf("drawer record with id %q accepted", id)
		}
	}
}

// The codec writes the fields it knows of: a field added to one of these
// types must be added to it (and to this list), or it would be lost.
func TestTheRecordCodecKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[store.Head]():    {"NextSeq", "Watermark", "Version"},
		reflect.TypeFor[catalog.Entry](): {"Origin", "ContentType", "Drawers", "Total", "Version"},
		reflect.TypeFor[drawer.Meta]():   {"ID", "Start", "Count", "FirstSeq", "LastSeq", "FirstAt", "LastAt"},
	}
	for typ, fields := range known {
		var got []string
		for _, f := range reflect.VisibleFields(typ) {
			got = append(got, f.Name)
		}
		if !reflect.DeepEqual(got, fields) {
			t.Errorf("%v has fields %v; the record codec knows %v", typ, got, fields)
		}
	}
}

// The head and entry a single save writes take under half their JSON size.
func TestASavesHeadAndEntryAreSmall(t *testing.T) {
	h, e := testHeads()[1], testEntries()[1]
	entry, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	jh, _ := json.Marshal(h)
	je, _ := json.Marshal(e)
	if got, was := len(encodeHead(h))+len(entry), len(jh)+len(je); got > was/2 {
		t.Fatalf("head and entry take %d bytes, JSON %d", got, was)
	}
}
