package server

import (
	"fmt"
	"io"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
)

// A compressed message is inflated before gRPC checks its size, and gRPC
// stops only at the message limit: a 40 KiB gzip bomb made the server
// allocate 32 MiB before refusing it. A compressed message may therefore
// inflate to at most inflateRatio times its compressed size (or
// minInflateLimit, whichever is more), and is refused as soon as it passes
// that: an attacker gets no more memory per byte sent than inflateRatio,
// while real messages pass up to the message limit, which gRPC still
// applies. Protobuf of UUIDs and names compresses far less: a full Save of
// the largest notifications with ids as alike as sequential ones, 100:1
// (TestACompressedSaveIsServed); with random ids, about 25:1.
const (
	inflateRatio = 128
	// minInflateLimit is above a content provider's largest message (1 MiB
	// and a bundle), which the hub's own clients receive.
	minInflateLimit = 2 << 20
)

// inflateRefusal begins the error of a message that inflates past its
// limit. gRPC answers the client INTERNAL with this message as soon as the
// read fails (before the server's code sees the error); decodeRequest
// (unreadable) records it as what it is, the client's RESOURCE_EXHAUSTED,
// so that it is not logged as a fault of the server.
const inflateRefusal = "compressed message inflates past"

// The gzip compressor is registered by importing gRPC's gzip package (the
// OTLP exporter does too); it is registered again here, bounded, in its
// place. Registration is process-wide, so the hub's clients (content
// providers, the exporter) decompress with the bound too.
func init() {
	encoding.RegisterCompressor(boundedDecompressor{encoding.GetCompressor(gzip.Name)})
}

// boundedDecompressor is a Compressor whose decompressed output is bounded
// by the compressed input's size.
type boundedDecompressor struct{ encoding.Compressor }

func (c boundedDecompressor) Decompress(r io.Reader) (io.Reader, error) {
	limit := int64(minInflateLimit)
	// gRPC hands over a reader of the whole compressed message, which
	// knows its length.
	if rem, ok := r.(interface{ Remaining() int }); ok {
		limit = max(limit, inflateRatio*int64(rem.Remaining()))
	}
	inner, err := c.Compressor.Decompress(r)
	if err != nil {
		return nil, err
	}
	return &inflateLimit{r: inner, left: limit, limit: limit}, nil
}

// inflateLimit fails once its reader yields more than limit bytes.
type inflateLimit struct {
	r           io.Reader
	left, limit int64
}

func (l *inflateLimit) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1] // one byte more than allowed tells whether there is more
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, fmt.Errorf("%s %d bytes (%d times its compressed size): send it uncompressed", inflateRefusal, l.limit, inflateRatio)
	}
	return n, err
}
