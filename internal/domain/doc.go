// Package domain holds MessageHub's types and rules: what a notification is,
// how it is validated, which domains a peek group covers and how a bundle is
// cut. It knows nothing about storage or transport.
//
// The words the code base uses for how notifications are kept and delivered:
//
//   - recipient: the market actor notifications are for; everything of one
//     recipient is stored together (a key prefix in pebble, a logical
//     partition in Cosmos DB).
//   - cabinet: a recipient's notifications of one domain and content type,
//     in the order they were saved; a bundle never mixes cabinets.
//   - catalog: a recipient's cabinets; each cabinet has a catalog entry.
//   - entry: the catalog record of one cabinet: its drawers and how many
//     positions were handed out.
//   - drawer: up to 10,000 consecutive notifications of a cabinet, numbered
//     by position; its notifications are stored in pages.
//   - page: up to 1,000 notifications of a drawer, packed in one stored item.
//   - head and watermark: a recipient's sequence counter, and the highest
//     sequence number readers may see (saves in flight are above it).
//   - cursor: how far a cabinet is acknowledged.
//   - bundle: what one Peek delivers: consecutive notifications of one
//     cabinet, pending until dequeued, then kept for the retention period.
//   - outbox: the notices of dequeued bundles whose domains are still to be
//     told (BundleDequeued), written with the dequeue and removed once told.
package domain
