package cosmos

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// feedPage is the most documents one change-feed request returns, and
// maxFeedPages the most pages one look at a feed reads: the rest is read by
// the next look.
const (
	feedPage     = 1000
	maxFeedPages = 100
)

// followFeed reads c's change feed (latest version, pull model) from
// cursor on, page by page, and calls fn with each page's documents, until a
// page comes back empty (every partition key range is at the present) or
// maxFeedPages pages are read. The empty cursor starts the feed at from
// (nil: the oldest change it keeps) and reads up to the present without
// showing fn the documents (nil), to find where the present is. fn also
// gets the page's session token (of the range it was read from), for reads
// that must see what the page showed: also a page passed over on the way
// to the present, whose changes the cursor returned is past. It returns
// the cursor after the last page read, also with an error (what was read
// before it is done), and the request units the reads cost.
func followFeed(ctx context.Context, c *azcosmos.ContainerClient, cursor string, from *time.Time, fn func(docs [][]byte, token string) error) (string, float64, error) {
	starting := cursor == ""
	var cost float64
	for range maxFeedPages {
		opts := &azcosmos.ChangeFeedOptions{MaxItemCount: feedPage}
		if cursor == "" {
			opts.FeedRange = &azcosmos.FeedRange{MinInclusive: "", MaxExclusive: "FF"}
			opts.StartFrom = from
		} else {
			opts.Continuation = &cursor
		}
		resp, err := c.ReadChangeFeed(ctx, opts)
		if err != nil {
			return cursor, cost, err
		}
		cost += float64(resp.RequestCharge)
		if resp.ContinuationToken != "" {
			cursor = resp.ContinuationToken
		}
		if len(resp.Items) == 0 {
			break
		}
		token := ""
		if resp.RawResponse != nil {
			token = resp.RawResponse.Header.Get(sessionTokenHeader)
		}
		docs := resp.Items
		if starting {
			docs = nil // before the present: only its token counts
		}
		if err := fn(docs, token); err != nil {
			return cursor, cost, err
		}
	}
	return cursor, cost, nil
}
