package admin

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// The backlog over every recipient: both calls read the hub's backlog
// figures (store.Figures), never the recipients themselves.

// Figures is what the list and the history need from the hub.
type Figures interface {
	BacklogFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error)
}

// Bounds of the requests.
const (
	defaultPageSize       = 100
	maxPageSize           = 1000
	defaultHistoryMinutes = 180
	maxHistoryMinutes     = 1440
)

// ListRecipients pages through the recipients of the figures' list in the
// order asked for. A page token names the figures it was cut from and the
// place in the list; a token of figures recounted since still goes on from
// its place, in the new list.
func (s *Service) ListRecipients(ctx context.Context, req *adminv1.ListRecipientsRequest) (*adminv1.ListRecipientsResponse, error) {
	size, err := bounded("page_size", req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	order := req.GetOrder()
	if _, ok := adminv1.RecipientOrder_name[int32(order)]; !ok {
		return nil, fmt.Errorf("%w: order %d is not a RecipientOrder", domain.ErrInvalidArgument, order)
	}
	from, err := parsePageToken(req.GetPageToken(), order)
	if err != nil {
		return nil, err
	}
	f, err := s.hub.BacklogFigures(ctx, store.FigureLists)
	if err != nil {
		return nil, err
	}
	list := f.Oldest
	if order == adminv1.RecipientOrder_RECIPIENT_ORDER_SIZE {
		list = f.Largest
	}
	resp := &adminv1.ListRecipientsResponse{ComputedAtMs: unixMilli(f.ComputedAt)}
	end := min(from+size, len(list))
	for _, r := range list[min(from, end):end] {
		resp.Recipients = append(resp.Recipients, &adminv1.RecipientBacklog{
			Recipient: r.Recipient, Waiting: r.Waiting, OldestWaitingSavedAtMs: unixMilli(r.Oldest),
			PendingBundles: int32(min(r.Pending, 1<<31-1)), //nolint:gosec // bounded just now
		})
	}
	if end < len(list) {
		resp.NextPageToken = pageToken(order, end)
	}
	return resp, nil
}

// bounded reads a request's count: 0 is def, else from 1 to most.
func bounded(field string, v int32, def, most int) (int, error) {
	switch n := int(v); {
	case n == 0:
		return def, nil
	case n < 0 || n > most:
		return 0, fmt.Errorf("%w: %s %d: from 1 to %d (0: %d)", domain.ErrInvalidArgument, field, n, most, def)
	default:
		return n, nil
	}
}

// pageToken says where the next page starts in the list of an order.
func pageToken(order adminv1.RecipientOrder, from int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("r1:" + strconv.Itoa(int(order)) + ":" + strconv.Itoa(from)))
}

// parsePageToken reads a pageToken of the same order; "" is the start.
func parsePageToken(token string, order adminv1.RecipientOrder) (int, error) {
	if token == "" {
		return 0, nil
	}
	bad := fmt.Errorf("%w: page_token %q is not one this call gave for order %s", domain.ErrInvalidArgument, token, order)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "r1" || parts[1] != strconv.Itoa(int(order)) {
		return 0, bad
	}
	// A list holds at most store.MaxListed: a place beyond it was never
	// given, and a place near the largest int would overflow with the page
	// size added.
	from, err := strconv.Atoi(parts[2])
	if err != nil || from < 0 || from > store.MaxListed {
		return 0, bad
	}
	return from, nil
}

// GetBacklogHistory returns the figures' samples of the last minutes asked
// for, oldest first.
func (s *Service) GetBacklogHistory(ctx context.Context, req *adminv1.GetBacklogHistoryRequest) (*adminv1.GetBacklogHistoryResponse, error) {
	minutes, err := bounded("minutes", req.GetMinutes(), defaultHistoryMinutes, maxHistoryMinutes)
	if err != nil {
		return nil, err
	}
	f, err := s.hub.BacklogFigures(ctx, store.FigureHistory)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.GetBacklogHistoryResponse{}
	if len(f.History) == 0 {
		return resp, nil
	}
	// The window ends at the last sample: figures are as old as their
	// recount, and the history keeps its shape when the recounts pause.
	since := f.History[len(f.History)-1].At.Add(-time.Duration(minutes) * time.Minute)
	for _, sample := range f.History {
		if !sample.At.After(since) {
			continue
		}
		out := &adminv1.BacklogSample{AtMs: sample.At.UnixMilli()}
		for _, o := range domain.Origins {
			b := sample.ByOrigin[o]
			var age int64
			if b.Notifications > 0 && !b.Oldest.IsZero() {
				age = max(int64(sample.At.Sub(b.Oldest)/time.Second), 0)
			}
			out.Domains = append(out.Domains, &adminv1.DomainBacklog{
				Domain: messagehubv1.Domain(o), Waiting: b.Notifications, OldestAgeSeconds: age,
			})
		}
		resp.Samples = append(resp.Samples, out)
	}
	return resp, nil
}
