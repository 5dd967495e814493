package cosmos

import (
	"encoding/json"
	"fmt"

	"github.com/energydatahub/messagehub/internal/drawer"
)

// pageDoc is a run of consecutive positions of one drawer: position s+i
// holds items[i] = [seq, id, weight, bundling 0/1, document type].
type pageDoc struct {
	ID    string            `json:"id"`
	PK    string            `json:"pk"`
	Start int64             `json:"s"`
	End   int64             `json:"e"`
	Items []json.RawMessage `json:"it"`
}

type pageItem struct {
	Seq      int64
	ID       string
	Weight   int64
	Bundling int
	DocType  string
}

func pageID(start int64) string { return fmt.Sprintf("%012d", start) }

func encodePage(p drawer.Page) (pageDoc, error) {
	doc := pageDoc{ID: pageID(p.Start()), PK: p.DrawerID, Start: p.Start(), End: p.Start() + int64(len(p.Items))}
	for i, it := range p.Items {
		if it.Pos != doc.Start+int64(i) {
			return doc, fmt.Errorf("page of drawer %s: positions are not consecutive", p.DrawerID)
		}
		flag := 0
		if it.SupportsBundling {
			flag = 1
		}
		raw, err := json.Marshal([]any{it.Seq, it.ID, it.Weight, flag, it.DocumentType})
		if err != nil {
			return doc, err
		}
		doc.Items = append(doc.Items, raw)
	}
	return doc, nil
}

func decodeItem(raw json.RawMessage, pos int64) (drawer.Item, error) {
	var fields []json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || len(fields) != 5 {
		return drawer.Item{}, fmt.Errorf("corrupt page item at %d", pos)
	}
	var it pageItem
	for i, dst := range []any{&it.Seq, &it.ID, &it.Weight, &it.Bundling, &it.DocType} {
		if err := json.Unmarshal(fields[i], dst); err != nil {
			return drawer.Item{}, fmt.Errorf("corrupt page item at %d: %w", pos, err)
		}
	}
	return drawer.Item{Pos: pos, Seq: it.Seq, ID: it.ID, DocumentType: it.DocType, SupportsBundling: it.Bundling == 1, Weight: it.Weight}, nil
}
