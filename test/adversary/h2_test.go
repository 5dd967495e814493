package adversary

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// h2 is a raw HTTP/2 connection to the hub's gRPC port: it sends what a
// well-behaved client never would (header blocks of any size, windows kept
// shut) and reads the hub's frames one by one.
type h2 struct {
	t     *testing.T
	conn  net.Conn
	fr    *http2.Framer
	block bytes.Buffer
	enc   *hpack.Encoder // its dynamic table lasts across the connection's calls
}

// dialH2 opens a connection with the client's settings.
func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Only keeps a hub that neither answers nor closes from hanging the test.
	if err := conn.SetDeadline(time.Now().Add(callTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &h2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.enc = hpack.NewEncoder(&c.block)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// call starts a call of path on stream id with extra header fields. With a
// message it sends it as the call's one gRPC message (flagged compressed if
// compressed is set) and ends the stream; without, the headers end it.
func (c *h2) call(id uint32, path string, extra []hpack.HeaderField, message []byte, compressed bool) error {
	c.block.Reset()
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "hub"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
	for _, f := range append(fields, extra...) {
		if err := c.enc.WriteField(f); err != nil {
			return err
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: c.block.Bytes(), EndHeaders: true, EndStream: message == nil,
	}); err != nil {
		return err
	}
	if message == nil {
		return nil
	}
	frame := make([]byte, 5, 5+len(message))
	if compressed {
		frame[0] = 1
	}
	binary.BigEndian.PutUint32(frame[1:], uint32(len(message)))
	frame = append(frame, message...)
	for len(frame) > 0 {
		n := min(len(frame), 16<<10) // the largest frame a peer must take
		if err := c.fr.WriteData(id, n == len(frame), frame[:n]); err != nil {
			return err
		}
		frame = frame[n:]
	}
	return nil
}

// event is what the hub did with a stream.
type event struct {
	stream   uint32
	answered bool          // headers of an answer (its body may follow)
	ended    bool          // trailers: the call's status
	code     codes.Code    // with ended
	message  string        // with ended
	reset    http2.ErrCode // RST_STREAM's code, when reset is set
	isReset  bool
	goAway   bool  // the hub is closing the connection (stream is its last)
	closed   bool  // the connection ended (stream 0)
	err      error // with closed: why
}

// next reads frames until the hub answers, ends or resets a stream, or
// closes the connection; settings and pings are acknowledged on the way. It
// calls no method of the test, so that goroutines may use it.
func (c *h2) next() event {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return event{closed: true, err: err}
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.fr.WriteSettingsAck(); err != nil {
					return event{closed: true}
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.fr.WritePing(true, f.Data); err != nil {
					return event{closed: true}
				}
			}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				return event{stream: f.StreamID, answered: true}
			}
			n, err := strconv.Atoi(field(f, "grpc-status"))
			if err != nil {
				return event{stream: f.StreamID, ended: true, code: codes.Unknown, message: fmt.Sprintf("trailers without grpc-status: %v", f.Fields)}
			}
			return event{stream: f.StreamID, ended: true, code: codes.Code(n), message: field(f, "grpc-message")}
		case *http2.RSTStreamFrame:
			return event{stream: f.StreamID, isReset: true, reset: f.ErrCode}
		case *http2.GoAwayFrame:
			return event{stream: f.LastStreamID, goAway: true}
		}
	}
}

func field(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}
