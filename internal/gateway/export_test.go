package gateway

import "time"

// WithContentPeeks bounds the documents being answered at once
// (GET /v1/peek/content) to total, and to perConn on one connection, in
// place of DefaultContentPeeks and DefaultContentPeeksPerConn.
func WithContentPeeks(total, perConn int) Option {
	return func(o *options) { o.contentPeeks, o.contentPeeksPerConn = total, perConn }
}

// WithContentStall cuts a document's answer when its client reads nothing of
// it for d, in place of DefaultContentStall.
func WithContentStall(d time.Duration) Option { return func(o *options) { o.contentStall = d } }
