package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// logRecords is a slog handler that hands every record to a channel.
type logRecords chan slog.Record

func (logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecords) Handle(_ context.Context, r slog.Record) error {
	l <- r.Clone()
	return nil
}
func (l logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logRecords) WithGroup(string) slog.Handler      { return l }

// untilAccessLine reads the records of one call up to its access log line
// (the last the server writes for it) and returns that line's code and the
// levels of the lines before it.
func (l logRecords) untilAccessLine(t *testing.T) (code string, levels []slog.Level) {
	t.Helper()
	for {
		select {
		case r := <-l:
			if r.Message != "call" {
				levels = append(levels, r.Level)
				continue
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "code" {
					code = a.Value.String()
				}
				return true
			})
			return code, levels
		case <-ctxT(t).Done():
			t.Fatal("no access log line")
		}
	}
}

// gRPC refuses a call whose request it cannot read (no request message, a
// second one, a compressed flag without an encoding) with INTERNAL before
// the server's code runs. That is the client's error: the server logs and
// counts it as INVALID_ARGUMENT, never as a fault of its own at ERROR, which
// any caller could otherwise fill with a line per call.
func TestACallWhoseRequestCannotBeReadIsNoServerFault(t *testing.T) {
	logs := make(logRecords, 64)
	hub := &recordingHub{}
	srv, hs := NewGRPCServer(hub, slog.New(logs))
	SetServing(hs, true)
	raw := newRawClientOf(t, srv, nil)
	conn := serveConn(t, srv)

	check := func(name string, err error) {
		t.Helper()
		if status.Code(err) == codes.OK {
			t.Errorf("%s: answered OK", name)
		}
		code, levels := logs.untilAccessLine(t)
		if code != codes.InvalidArgument.String() {
			t.Errorf("%s: logged as %s, want %s", name, code, codes.InvalidArgument)
		}
		for _, level := range levels {
			if level >= slog.LevelWarn {
				t.Errorf("%s: logged at %s", name, level)
			}
		}
	}
	for _, method := range []string{
		messagehubv1.MessageHub_Save_FullMethodName,
		messagehubv1.MessageHub_Peek_FullMethodName,
		messagehubv1.MessageHub_Dequeue_FullMethodName,
		messagehubv1.MessageHub_PeekContent_FullMethodName,
	} {
		for _, requests := range []int{0, 2} {
			s, err := conn.NewStream(ctxT(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			for range requests {
				if err := s.SendMsg(rawBytes{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("%s with %d requests", method, requests), s.RecvMsg(new(rawBytes)))
		}
	}

	var block bytes.Buffer
	raw.request(hpack.NewEncoder(&block), &block, 1, messagehubv1.MessageHub_Peek_FullMethodName, nil, nil, true)
	st, msg, _ := raw.outcome(1)
	check("a compressed flag without an encoding", status.Error(st, msg))

	if n := hub.calls(); n != 0 {
		t.Errorf("unreadable calls reached the hub %d times", n)
	}
}
