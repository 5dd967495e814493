package store_test

import (
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// The backlog counts the positions after each cursor that the drawer runs
// hold: positions a store gave back (between runs) are no notifications,
// and the oldest is the first held one.
func TestBacklogCountsTheHeldPositionsAfterTheCursor(t *testing.T) {
	runs := []drawer.Meta{
		{ID: "a", Start: 0, Count: 4, FirstAt: 1_000, LastAt: 1_003},
		{ID: "a", Start: 7, Count: 3, FirstAt: 2_007, LastAt: 2_009},
		{ID: "b", Start: 12, Count: 5, FirstAt: 3_000, LastAt: 3_000},
	}
	entries := []catalog.Entry{
		{Origin: domain.OriginCharges, ContentType: "c", Drawers: runs, Total: 17},
		{Origin: domain.OriginTimeSeries, ContentType: "t", Drawers: runs[:1], Total: 6}, // 4 and 5 given back
	}
	cursors := []catalog.Cursor{
		{Origin: domain.OriginCharges, ContentType: "c", Acked: 5},
		{Origin: domain.OriginTimeSeries, ContentType: "t", Acked: 4},
	}
	var b store.Backlog
	b.Add(entries, cursors)
	got := b.ByOrigin[domain.OriginCharges]
	if got.Notifications != 8 || !got.Oldest.Equal(time.UnixMilli(2_007)) {
		t.Errorf("charges backlog = %+v; want 8 notifications, the oldest saved at 2007", got)
	}
	if got, ok := b.ByOrigin[domain.OriginTimeSeries]; ok && got.Notifications != 0 {
		t.Errorf("time series backlog = %+v; want nothing: the positions after its cursor were given back", got)
	}
	if b.Recipients != 1 {
		t.Errorf("%d recipients waiting, want 1", b.Recipients)
	}
}
