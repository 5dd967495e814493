package server

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// request starts a call of path on stream id with the extra header fields
// (encoded with enc, whose dynamic table lasts across calls), and sends
// message as its one gRPC message, compressed if the flag says so.
func (c *rawClient) request(enc *hpack.Encoder, block *bytes.Buffer, id uint32, path string, extra []hpack.HeaderField, message []byte, compressed bool) {
	c.t.Helper()
	block.Reset()
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "hub"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
	for _, f := range append(fields, extra...) {
		if err := enc.WriteField(f); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	frame := make([]byte, 5+len(message))
	if compressed {
		frame[0] = 1
	}
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(message)))
	copy(frame[5:], message)
	for len(frame) > 0 {
		n := min(len(frame), 16<<10) // the default largest frame
		if err := c.fr.WriteData(id, n == len(frame), frame[:n]); err != nil {
			c.t.Fatal(err)
		}
		frame = frame[n:]
	}
}

// outcome reads frames until the server ends or resets stream id, and
// returns its grpc-status and grpc-message, or the reset's code.
func (c *rawClient) outcome(id uint32) (codes.Code, string, http2.ErrCode) {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading the server's frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.fr.WriteSettingsAck(); err != nil {
					c.t.Fatal(err)
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.fr.WritePing(true, f.Data); err != nil {
					c.t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				n, err := strconv.Atoi(headerValue(f, "grpc-status"))
				if err != nil {
					c.t.Fatalf("trailers without grpc-status: %v", f.Fields)
				}
				return codes.Code(n), headerValue(f, "grpc-message"), 0
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return codes.OK, "", f.ErrCode
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("the server closed the connection: %v", f.ErrCode)
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// An HPACK bomb: a header block of a few KiB that refers to one 4 KB field
// of the dynamic table a thousand times, 4 MB once decoded. The server
// advertises its header list limit and refuses a block that decodes past it;
// a block within it is served.
func TestAHeaderBlockOverTheLimitIsRefused(t *testing.T) {
	c := newRawClient(t, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	check := "/grpc.health.v1.Health/Check"

	c.request(enc, &block, 1, check, []hpack.HeaderField{{Name: "x-small", Value: "within the limit"}}, nil, false)
	var advertised uint32
	for {
		id, ev := c.next(func(s http2.Setting) {
			if s.ID == http2.SettingMaxHeaderListSize {
				advertised = s.Val
			}
		})
		if id == 1 && (ev.answered || ev.ended) {
			break
		}
		if id == 1 {
			t.Fatalf("a small header block: %+v", ev)
		}
	}
	if advertised == 0 || advertised > MaxHeaderListSize {
		t.Errorf("the server advertises a header list limit of %d, want %d", advertised, MaxHeaderListSize)
	}

	bomb := make([]hpack.HeaderField, 1000)
	for i := range bomb {
		bomb[i] = hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	}
	c.request(enc, &block, 3, check, bomb, nil, false)
	t.Logf("a header block of %d bytes decoding to %d", block.Len(), len(bomb)*(4000+6+32))
	if st, _, rst := c.outcome(3); rst == 0 {
		t.Fatalf("a header block decoding to 4 MB: answered with status %v, want the stream reset", st)
	}
}

// A gzip bomb: a 40 KiB message that inflates to 40 MiB, past the 32 MiB
// message limit. It is refused once it inflates past what a message of its
// compressed size may, without inflating to the message limit first.
func TestAGzipBombIsRefusedWithoutInflatingIt(t *testing.T) {
	const inflated = 40 << 20
	var compressed bytes.Buffer
	zw := stdgzip.NewWriter(&compressed)
	if _, err := io.CopyN(zw, zeros{}, inflated); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	gz := []hpack.HeaderField{{Name: "grpc-encoding", Value: "gzip"}}

	// The first call warms the connection and gzip's pools up.
	c.request(enc, &block, 1, messagehubv1.MessageHub_Save_FullMethodName, gz, gzipped(t, nil), true)
	if st, _, rst := c.outcome(1); st != codes.InvalidArgument {
		t.Fatalf("an empty compressed save: status %v, reset %v; want InvalidArgument", st, rst)
	}

	var st codes.Code
	var msg string
	n := allocated(func() {
		c.request(enc, &block, 3, messagehubv1.MessageHub_Save_FullMethodName, gz, compressed.Bytes(), true)
		st, msg, _ = c.outcome(3)
	})
	t.Logf("%.1f KiB inflating to %d MiB: status %v %q, %.1f MiB allocated", float64(compressed.Len())/(1<<10), inflated>>20, st, msg, float64(n)/(1<<20))
	// gRPC answers a message it could not decompress with INTERNAL before
	// the server's code runs; the message says what to do.
	if st == codes.OK || !strings.Contains(msg, "send it uncompressed") {
		t.Errorf("status %v %q, want a refusal saying to send it uncompressed", st, msg)
	}
	if limit := uint64(8 << 20); n > limit {
		t.Errorf("%d bytes allocated to refuse it, want at most %d", n, limit)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := stdgzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Compressed calls of real clients go through: a full Save of the largest
// notifications compresses less than the bound allows, even with ids as
// alike as a test makes them.
func TestACompressedSaveIsServed(t *testing.T) {
	hub := &recordingHub{saveResult: domain.SaveResult{Saved: domain.MaxNotificationsPerSave}}
	conn, _ := testConn(t, hub)
	req := &messagehubv1.SaveRequest{Notifications: notifications(domain.MaxNotificationsPerSave)}
	for _, n := range req.Notifications {
		n.ContentType = strings.Repeat("c", domain.MaxContentTypeLength)
		n.DocumentType = strings.Repeat("d", domain.MaxContentTypeLength)
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes, %d gzipped", len(wire), len(gzipped(t, wire)))
	if _, err := messagehubv1.NewMessageHubClient(conn).Save(ctxT(t), req, grpc.UseCompressor(gzip.Name)); err != nil {
		t.Fatalf("a compressed save: %v", err)
	}
	if len(hub.saves) != 1 || len(hub.saves[0]) != domain.MaxNotificationsPerSave {
		t.Fatalf("the hub got %d saves", len(hub.saves))
	}
}
