package drawer

import (
	"context"
	"slices"

	"golang.org/x/sync/errgroup"
)

// MaxParallelReads is how many drawers are read at once. Six drawers of
// 10,000 hold more than the largest possible bundle (51,200 notifications).
const MaxParallelReads = 6

// firstReadLimit bounds the first read of a scan, so that a small bundle does
// not read a whole drawer.
const firstReadLimit = 1_024

// ReadFunc reads up to limit items of a drawer with from ≤ position < to, in
// position order.
type ReadFunc func(ctx context.Context, drawerID string, from, to int64, limit int) ([]Item, error)

// span is a piece of one drawer: positions [from, to).
type span struct {
	drawerID string
	from, to int64
}

func spans(drawers []Meta, from, to int64) []span {
	var out []span
	for _, d := range drawers {
		lo, hi := max(from, d.Start), min(to, d.End())
		if lo < hi {
			out = append(out, span{d.ID, lo, hi})
		}
	}
	return out
}

// ReadRange returns the items at positions [from, to) of the drawers, reading
// up to MaxParallelReads drawers at once.
func ReadRange(ctx context.Context, read ReadFunc, drawers []Meta, from, to int64) ([]Item, error) {
	parts, err := readSpans(ctx, read, spans(drawers, from, to))
	if err != nil {
		return nil, err
	}
	return slices.Concat(parts...), nil
}

func readSpans(ctx context.Context, read ReadFunc, ss []span) ([][]Item, error) {
	parts := make([][]Item, len(ss))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(MaxParallelReads)
	for i, s := range ss {
		g.Go(func() error {
			items, err := read(ctx, s.drawerID, s.from, s.to, int(s.to-s.from))
			parts[i] = items
			return err
		})
	}
	return parts, g.Wait()
}

// Scan feeds take the items of the drawers from position from on, in
// position order, until take returns false or the items run out. need says
// at most how many more items take can still accept; it bounds read-ahead.
// The first read is small; later reads cover up to MaxParallelReads drawers
// in parallel.
func Scan(ctx context.Context, read ReadFunc, drawers []Meta, from int64, need func() int, take func(Item) bool) error {
	rest := spans(drawers, from, 1<<62)
	limit := firstReadLimit
	for len(rest) > 0 {
		want := int64(min(need(), limit))
		if want <= 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var batch []span
		for len(rest) > 0 && len(batch) < MaxParallelReads && want > 0 {
			s := rest[0]
			n := min(s.to-s.from, want)
			batch = append(batch, span{s.drawerID, s.from, s.from + n})
			want -= n
			if s.from+n == s.to {
				rest = rest[1:]
			} else {
				rest[0].from += n
			}
		}
		parts, err := readSpans(ctx, read, batch)
		if err != nil {
			return err
		}
		for _, part := range parts {
			for _, it := range part {
				if !take(it) {
					return nil
				}
			}
		}
		limit = 1 << 30
	}
	return nil
}
