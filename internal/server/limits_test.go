package server

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"math"
	"net/url"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
)

// rawClient speaks HTTP/2 to the server itself, frame by frame, as a client
// that ignores the limits the server advertises would.
type rawClient struct {
	t  *testing.T
	fr *http2.Framer
}

func newRawClient(t *testing.T, settings []http2.Setting, opts ...Option) *rawClient {
	t.Helper()
	return newRawClientOver(t, &recordingHub{}, settings, opts...)
}

// newRawClientOver is newRawClient of a server over hub.
func newRawClientOver(t *testing.T, hub Hub, settings []http2.Setting, opts ...Option) *rawClient {
	t.Helper()
	srv, hs := NewGRPCServer(hub, slog.New(slog.DiscardHandler), opts...)
	SetServing(hs, true)
	return newRawClientOf(t, srv, settings)
}

// newRawClientOf is newRawClient of srv.
func newRawClientOf(t *testing.T, srv *grpc.Server, settings []http2.Setting) *rawClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := lis.DialContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Only keeps a broken server from hanging the test.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// open starts a health Watch on stream id; with request it also sends the
// (empty) request, so that the call runs until the client ends it.
func (c *rawClient) open(id uint32, request bool) { c.call(id, "Watch", request) }

// call starts a call of a health method on stream id, with its (empty)
// request if request is set.
func (c *rawClient) call(id uint32, method string, request bool) {
	c.t.Helper()
	var body []byte
	if request {
		body = []byte{}
	}
	c.callPath(id, "/grpc.health.v1.Health/"+method, body)
}

// callPath starts a call of the method at path on stream id, with the
// request message body unless body is nil.
func (c *rawClient) callPath(id uint32, path string, body []byte) {
	c.t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "hub"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		// A gRPC message, not compressed.
		frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
		if err := c.fr.WriteData(id, true, append(frame, body...)); err != nil {
			c.t.Fatal(err)
		}
	}
}

// event is what the server did with a stream: answered it (response
// headers of a running call), ended it (its trailers) or reset it (with its
// code).
type event struct {
	answered, ended bool
	reset           http2.ErrCode
	message         string // an ended call's grpc-message
}

// next reads frames until the server answers or resets a stream, and
// reports which and how. Settings and pings are acknowledged on the way;
// the server's settings are handed to settings.
func (c *rawClient) next(settings func(http2.Setting)) (uint32, event) {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading the server's frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if settings != nil {
				_ = f.ForeachSetting(func(s http2.Setting) error { settings(s); return nil })
			}
			if err := c.fr.WriteSettingsAck(); err != nil {
				c.t.Fatal(err)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.fr.WritePing(true, f.Data); err != nil {
					c.t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				var message string
				for _, h := range f.RegularFields() {
					if h.Name == "grpc-message" {
						message, _ = url.PathUnescape(h.Value) // percent-encoded
					}
				}
				return f.StreamID, event{ended: true, message: message}
			}
			return f.StreamID, event{answered: true}
		case *http2.RSTStreamFrame:
			return f.StreamID, event{reset: f.ErrCode}
		case *http2.GoAwayFrame:
			c.t.Fatalf("the server closed the connection: %v", f.ErrCode)
		}
	}
}

// A client that never reads its answers cannot pile up calls on one
// connection: the server advertises MaxConcurrentStreams, refuses a stream
// beyond it (even from a client that ignores the setting), and accepts a new
// one once a call has ended.
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	c := newRawClient(t, nil, WithLimits(Limits{MaxConcurrentStreams: 2}))
	advertised := uint32(0)
	c.open(1, true)
	c.open(3, true)
	got := map[uint32]event{}
	for len(got) < 2 {
		id, ev := c.next(func(s http2.Setting) {
			if s.ID == http2.SettingMaxConcurrentStreams {
				advertised = s.Val
			}
		})
		got[id] = ev
	}
	if advertised != 2 {
		t.Errorf("the server advertises %d concurrent streams, want 2", advertised)
	}
	for _, id := range []uint32{1, 3} {
		if !got[id].answered {
			t.Fatalf("streams within the limit: %v", got)
		}
	}

	c.open(5, false)
	if id, ev := c.next(nil); id != 5 || ev.reset != http2.ErrCodeRefusedStream {
		t.Fatalf("a third stream beside two running on a connection capped at two: stream %d %+v, want 5 refused", id, ev)
	}

	// Once a call ends, its place is free.
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	c.open(7, true)
	if id, ev := c.next(nil); id != 7 || !ev.answered {
		t.Fatalf("a new stream once one ended: stream %d %+v, want 7 answered", id, ev)
	}
}

// An answer the client does not read keeps its call's place: with the
// stream cap, unread answers cannot pile up on a connection. (The client
// here never opens its flow-control window, so no answer can be sent.)
func TestAnUnreadAnswerKeepsItsPlaceUntilSent(t *testing.T) {
	c := newRawClient(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}},
		WithLimits(Limits{MaxConcurrentStreams: 1}))
	c.call(1, "Check", true)
	if id, ev := c.next(nil); id != 1 || !ev.answered {
		t.Fatalf("the first call: stream %d %+v, want 1 answered", id, ev)
	}
	c.call(3, "Check", true)
	if id, ev := c.next(nil); id != 3 || ev.reset != http2.ErrCodeRefusedStream {
		t.Fatalf("a second call while the first answer is unread: stream %d %+v, want 3 refused", id, ev)
	}

	// The client reads: the answer goes out, and the place is free.
	if err := c.fr.WriteWindowUpdate(1, 1<<16); err != nil {
		t.Fatal(err)
	}
	if id, ev := c.next(nil); id != 1 || !ev.ended {
		t.Fatalf("the first call once its answer could be sent: stream %d %+v, want 1 ended", id, ev)
	}
	c.call(5, "Check", true)
	if id, ev := c.next(nil); id != 5 || !ev.answered {
		t.Fatalf("a call once the first answer was sent: stream %d %+v, want 5 answered", id, ev)
	}
}

// goAway reads frames until the server closes the connection, and returns
// its code.
func (c *rawClient) goAway() http2.ErrCode {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading the server's frames: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

// No client keeps a connection forever: past MaxConnectionAge the server
// asks it to go away (and reconnect, possibly to another instance).
func TestConnectionsAreClosedAtTheirMaximumAge(t *testing.T) {
	c := newRawClient(t, nil, WithLimits(Limits{MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: time.Second}))
	if code := c.goAway(); code != http2.ErrCodeNo {
		t.Fatalf("closed with %v, want a graceful GOAWAY (NO_ERROR)", code)
	}
}

// gRPC adds a random jitter of up to a tenth to a connection's maximum age;
// at the longest age --grpc-max-connection-age takes (the largest
// time.Duration) that sum must not overflow, or the connection's age timer
// is negative and the server closes it as soon as it opens.
func TestTheLongestMaximumAgeLeavesRoomForItsJitter(t *testing.T) {
	for _, age := range []time.Duration{math.MaxInt64 - 1, math.MaxInt64 / 10 * 9, 30 * time.Minute} {
		p := keepaliveParams(Limits{MaxConnectionAge: age})
		if p.MaxConnectionAge == infinity {
			continue // gRPC adds no jitter to "never"
		}
		if p.MaxConnectionAge < age || p.MaxConnectionAge > math.MaxInt64-p.MaxConnectionAge/10 {
			t.Errorf("a maximum age of %s becomes %s, which its jitter of a tenth overflows", age, p.MaxConnectionAge)
		}
	}
}
