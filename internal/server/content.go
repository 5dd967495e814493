package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/domain"
)

// DefaultContentTimeout is how long a PeekContent waits for a document, from
// its own start (from when its bundle is picked, after a wait): inside the
// original service's 30 s for a whole Peek.
const DefaultContentTimeout = 25 * time.Second

// Documents gives a pending bundle its document (internal/content.Service).
// It returns nil and no error when the bundle's domain has no provider.
type Documents interface {
	Document(ctx context.Context, bundle *messagehubv1.Bundle) (*content.Document, error)
}

// WithDocuments serves PeekContent with d, waiting at most timeout (from the
// call's start, or from the end of its wait for a bundle) for a document. Without it every bundle is served with no
// document.
func WithDocuments(d Documents, timeout time.Duration) Option {
	return func(o *options) {
		o.documents = d
		o.contentTimeout = timeout
	}
}

// PeekContent picks the bundle as Peek does (waiting for one as Peek does)
// and streams its document: the
// bundle and media type first, then the data, each message at most
// content.MaxMessageBytes (a bundle too large to share its message with
// data is sent alone).
//
// It counts as a Peek (messagehub_peeks_total) once it has answered: one
// that fails, such as one whose document is not built in time, returned
// its caller no bundle.
func (s *Service) PeekContent(req *messagehubv1.PeekRequest, stream grpc.ServerStreamingServer[messagehubv1.PeekContentChunk]) error {
	delivered, err := s.peekContent(req, stream)
	if err == nil {
		s.metrics.RecordPeek(stream.Context(), delivered)
	}
	return err
}

// peekContent is PeekContent, not counted; delivered says whether it sent
// a bundle.
func (s *Service) peekContent(req *messagehubv1.PeekRequest, stream grpc.ServerStreamingServer[messagehubv1.PeekContentChunk]) (delivered bool, _ error) {
	timeout := cmp.Or(s.contentTimeout, DefaultContentTimeout)
	var peeked *messagehubv1.PeekResponse
	var err error
	ctx, cancel := context.WithTimeout(stream.Context(), timeout)
	if req.GetWaitMs() == 0 {
		peeked, err = s.peek(ctx, req)
	} else {
		// The wait is the caller's and may outlast the content timeout,
		// which then counts from when the bundle is picked.
		peeked, err = s.peek(stream.Context(), req)
		cancel()
		ctx, cancel = context.WithTimeout(stream.Context(), timeout)
	}
	defer cancel()
	if err != nil || peeked.GetBundle() == nil {
		return false, outOfTime(ctx, stream.Context(), err)
	}
	first := &messagehubv1.PeekContentChunk{Bundle: peeked.GetBundle()}
	if s.documents == nil {
		return true, sendHeld(stream, first.GetBundle().GetRecipient(), first)
	}
	doc, err := s.documents.Document(ctx, first.Bundle)
	if errors.Is(err, content.ErrNotReady) && stream.Context().Err() == nil {
		// The domain is still building it: routine, the actor peeks again.
		return false, routine{err}
	}
	if err != nil {
		return false, outOfTime(ctx, stream.Context(), err)
	}
	if doc == nil {
		return true, sendHeld(stream, first.GetBundle().GetRecipient(), first)
	}
	defer func() { _ = doc.Body.Close() }()
	// A read of the document may wait for as long as its download stays
	// quiet (a connection that stops carrying data without closing): the
	// caller leaving ends it, so that the call returns what it holds.
	defer context.AfterFunc(stream.Context(), func() { _ = doc.Body.Close() })()
	first.MediaType = doc.MediaType
	return true, sendDocument(stream, first, doc.Body)
}

// outOfTime makes a content peek that ran out of its own time (not the
// caller's) UNAVAILABLE wherever the time ran out: in the store's peek (a
// slow store) as in the wait for the document. The caller peeks again. One
// the caller gave up on (cancelled, or past its deadline) ends with the
// caller's own error, whatever was waited for: that is the caller's choice,
// not a fault of the hub or its store.
//
// The error that ran out of time is the store's or the document store's
// own (a blob's name and URL, an SDK's answer): the client reads only that
// the peek ran out of time (domain.Private), the log the whole of it.
func outOfTime(ctx, call context.Context, err error) error {
	if err != nil && call.Err() != nil {
		return fmt.Errorf("the caller stopped waiting: %w", call.Err())
	}
	if err == nil || errors.Is(err, domain.ErrUnavailable) || ctx.Err() == nil {
		return err
	}
	public := fmt.Errorf("%w: the content peek ran out of time; peek again", domain.ErrUnavailable)
	return &domain.Private{Err: fmt.Errorf("%w: %w", public, err), Public: public.Error()}
}

// sendHeld sends msg, an answer to actor, holding its encoded size of the
// answers' budget until gRPC has written it (answers.go): a bundle sent
// alone is as large as a Peek's answer, up to about 16 MiB, and a client
// that does not read it must not make the server hold more than the budget
// allows.
func sendHeld(stream grpc.ServerStreamingServer[messagehubv1.PeekContentChunk], actor string, msg *messagehubv1.PeekContentChunk) error {
	if _, ok := stream.Context().Value(connAnswersKey{}).(*connAnswers); !ok {
		// A gRPC server not built by this package (a bare grpc.NewServer
		// with the Service registered) has neither the budget nor the
		// codec that encodes a heldAnswer.
		return stream.Send(msg)
	}
	release, err := reserve(stream.Context(), actor, int64(proto.Size(msg)))
	if err != nil {
		return err
	}
	return stream.SendMsg(&heldAnswer{msg: msg, release: release})
}

// messageOverhead is room left in each message for the data field's tag and
// length.
const messageOverhead = 16

// sendDocument streams first (with as much data as fits) and then the rest
// of body, every message within content.MaxMessageBytes.
func sendDocument(stream grpc.ServerStreamingServer[messagehubv1.PeekContentChunk], first *messagehubv1.PeekContentChunk, body io.Reader) error {
	ctx := stream.Context()
	// The read buffer counts against the answers' budget for the whole
	// call, each message until it is written (see answers.go).
	actor := first.GetBundle().GetRecipient()
	releaseBuf, err := reserve(ctx, actor, content.MaxMessageBytes)
	if err != nil {
		return err
	}
	defer releaseBuf()
	buf := make([]byte, content.MaxMessageBytes-messageOverhead)
	room := max(len(buf)-proto.Size(first), 0)
	msg := first
	for {
		n, err := fill(body, buf[:room])
		if n > 0 || msg == first {
			msg.Data = buf[:n]
			if serr := sendHeld(stream, actor, msg); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			// The stored document could not be read to its end (a blob's
			// download broken off): the actor peeks again.
			return fmt.Errorf("%w: reading the bundle's document broke off; peek again: %w", domain.ErrUnavailable, err)
		}
		msg, room = &messagehubv1.PeekContentChunk{}, len(buf)
	}
}

// fill reads body into buf until buf is full or body ends (io.EOF), and
// returns any other error as it is. Unlike io.ReadFull, which answers
// io.ErrUnexpectedEOF for a short last read, it never makes an error of the
// end: so a body that itself fails with io.ErrUnexpectedEOF (a blob's
// download broken half-way, its retries spent) is a failure, not the end of
// the document.
func fill(body io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := body.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
