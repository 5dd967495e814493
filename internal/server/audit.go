package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// The audit log is recorded here, in one place for every call: after a call
// succeeded, its event is made from the request and the answer (their
// recipient, bundle id and reason) and the caller's subject. The HTTP
// gateway's calls pass the same interceptors (they reach a gRPC server of
// the same options), so they are recorded alike. What is recorded:
//
//   - an actor's Peek that returned a bundle, PeekContent that sent one,
//     and Dequeue; an empty Peek fetched nothing and is not recorded;
//   - an operator's remedies (ReleaseBundle, AcknowledgeOnBehalf: one
//     event per bundle dequeued), written before the call answers;
//   - an operator's look at a recipient's queue (GetBacklog,
//     PreviewNextBundle, TraceNotification) as INSPECT;
//   - a Dequeue, AcknowledgeOnBehalf or ReleaseBundle that failed after
//     writing a bundle's dequeue or release whose outcome is unknown
//     (hub.OutcomeUnknown), marked so.
//
// Actors' events and inspections are buffered (Auditor.Record): the call
// never waits for the audit log nor fails because of it.

// Auditor keeps the audit log (audit.Log).
type Auditor interface {
	// Record buffers events for writing, without waiting.
	Record(e audit.Event)
	// Write stores events before it returns.
	Write(ctx context.Context, events ...audit.Event) error
	// Hold keeps what Write stores to open until release, for the events
	// written with the context returned (audit.Log.Hold).
	Hold(ctx context.Context) (held context.Context, release func(), err error)
	// Begin tells it of a call that may record events, until end: its
	// last flush waits for the call (audit.Log.Begin), which a shutdown
	// may have cut off but not yet ended.
	Begin() (end func())
}

// WithAudit records the audit log of every call in a; subject names a
// call's caller (the token's subject).
func WithAudit(a Auditor, subject func(context.Context) string) Option {
	return func(o *options) { o.auditor, o.subject = a, subject }
}

// auditCall says what a method records: its action and what the detail
// says beyond a remedy's reason.
type auditCall struct {
	action audit.Action
	detail func(req, resp any) string
}

var auditCalls = map[string]auditCall{
	messagehubv1.MessageHub_Peek_FullMethodName:        {action: audit.ActionPeek},
	messagehubv1.MessageHub_PeekContent_FullMethodName: {action: audit.ActionPeekContent},
	messagehubv1.MessageHub_Dequeue_FullMethodName:     {action: audit.ActionDequeue},
	adminv1.Admin_ReleaseBundle_FullMethodName:         {action: audit.ActionReleaseBundle},
	adminv1.Admin_AcknowledgeOnBehalf_FullMethodName: {action: audit.ActionAcknowledgeOnBehalf, detail: func(req, _ any) string {
		r, _ := req.(*adminv1.AcknowledgeOnBehalfRequest)
		return fmt.Sprintf("up to notification %s of %s/%s", strings.ToLower(r.GetUpToNotificationId()), r.GetDomain(), r.GetContentType())
	}},
	adminv1.Admin_GetBacklog_FullMethodName: {action: audit.ActionInspect, detail: func(any, any) string { return "backlog" }},
	adminv1.Admin_PreviewNextBundle_FullMethodName: {action: audit.ActionInspect, detail: func(req, _ any) string {
		r, _ := req.(*adminv1.PreviewNextBundleRequest)
		return "next bundle of " + r.GetGroup().String()
	}},
	adminv1.Admin_TraceNotification_FullMethodName: {action: audit.ActionInspect, detail: func(req, _ any) string {
		r, _ := req.(*adminv1.TraceNotificationRequest)
		return "notification " + strings.ToLower(r.GetNotificationId())
	}},
}

// auditEvents returns the events a successful call of method records (none
// for a method that records nothing, a Peek that found nothing, or an
// AcknowledgeOnBehalf that dequeued nothing). at and
// subject are when and by whom.
func auditEvents(method string, req, resp any, subject string, at time.Time) []audit.Event {
	call, ok := auditCalls[method]
	if !ok {
		return nil
	}
	e := audit.Event{At: at, Action: call.action, Subject: subject}
	if r, ok := req.(interface{ GetRecipient() string }); ok {
		// Valid, since the call succeeded, but in any letter case.
		e.Recipient = strings.ToLower(r.GetRecipient())
	}
	var bundles []string
	switch r := resp.(type) {
	case *messagehubv1.PeekResponse: // Peek
		if r.GetBundle() == nil {
			return nil
		}
		bundles = []string{r.GetBundle().GetId()}
		e.Recipient = r.GetBundle().GetRecipient()
	case *messagehubv1.Bundle: // PeekContent's bundle
		bundles = []string{r.GetId()}
		e.Recipient = r.GetRecipient()
	case *adminv1.PreviewNextBundleResponse:
		bundles = []string{r.GetBundle().GetBundleId()}
	case interface{ GetBundleIds() []string }: // AcknowledgeOnBehalf
		// One event per bundle dequeued: a call that found the notification
		// dequeued already changed nothing, and records nothing.
		if bundles = r.GetBundleIds(); len(bundles) == 0 {
			return nil
		}
	case interface{ GetBundleId() string }: // inspections naming a bundle
		bundles = []string{r.GetBundleId()}
	}
	if r, ok := req.(interface{ GetBundleId() string }); ok && len(bundles) == 0 {
		bundles = []string{r.GetBundleId()} // Dequeue, ReleaseBundle
	}
	if r, ok := req.(interface{ GetReason() string }); ok {
		e.Detail = r.GetReason()
	}
	if call.detail != nil {
		extra := call.detail(req, resp)
		if e.Detail != "" {
			// What the call did is kept whole; a reason that leaves no
			// room for it is cut.
			extra = " (" + extra + ")"
			extra = truncate(e.Detail, max(audit.MaxDetail-len(extra), 0)) + extra
		}
		e.Detail = extra
	}
	e.Detail = truncate(e.Detail, audit.MaxDetail)
	if e.Recipient == "" {
		return nil
	}
	if len(bundles) == 0 {
		bundles = []string{""}
	}
	events := make([]audit.Event, 0, len(bundles))
	for _, b := range bundles {
		e.BundleID = strings.ToLower(b)
		events = append(events, e)
	}
	return events
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// PartialAnswer is the error of a call that failed part-way after it
// changed something (an acknowledgement on an actor's behalf cut short,
// which keeps the bundles it dequeued): Answer is what it did, as an answer
// of its method, which the audit log records as it records a successful
// call's. The client gets Err.
type PartialAnswer struct {
	Err    error
	Answer any
}

func (p *PartialAnswer) Error() string { return p.Err.Error() }
func (p *PartialAnswer) Unwrap() error { return p.Err }

// remedyRecordTime bounds the write of a remedy's audit record, which does
// not end with its caller's call: the remedy took effect whether or not the
// caller still waits.
const remedyRecordTime = 5 * time.Second

// record keeps the events of a successful call (see keep).
func (o *options) record(ctx context.Context, method string, req, resp any) error {
	return o.keep(ctx, method, auditEvents(method, req, resp, o.subject(ctx), time.Now()))
}

// keep keeps events of a call of method: a remedy's before it answers (a
// failure to write them fails the call, saying the remedy took effect and
// that its record waits for the audit log's next flush), the others
// buffered.
func (o *options) keep(ctx context.Context, method string, events []audit.Event) error {
	return o.keepAs(ctx, method, events, "took effect")
}

// keepAs is keep, where effect says what the remedy did: "took effect", or
// "may have taken effect" for one whose outcome is unknown.
func (o *options) keepAs(ctx context.Context, method string, events []audit.Event, effect string) error {
	if len(events) == 0 {
		return nil
	}
	if !events[0].Action.Remedy() {
		for _, e := range events {
			o.auditor.Record(e)
		}
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), remedyRecordTime)
	defer cancel()
	if err := o.auditor.Write(wctx, events...); err != nil {
		return fmt.Errorf("%w: %s %s, but its audit record could not be written yet (it is kept for the audit log's next flush): %w",
			domain.ErrUnavailable, method[strings.LastIndex(method, "/")+1:], effect, err)
	}
	return nil
}

// outcomeUnknown marks the event of a dequeue or release that may have
// applied (hub.OutcomeUnknown).
const outcomeUnknown = " [outcome unknown: the store's answer was lost; it may have applied]"

// failedEvents returns the events of a call that failed with err: what it
// did before it failed (PartialAnswer), and the dequeue or release it
// wrote whose outcome is unknown (hub.OutcomeUnknown), which no repeat of
// the call records, since a repeat finds it done.
func (o *options) failedEvents(ctx context.Context, method string, req any, err error) []audit.Event {
	subject, at := o.subject(ctx), time.Now()
	var events []audit.Event
	var partial *PartialAnswer
	if errors.As(err, &partial) {
		events = auditEvents(method, req, partial.Answer, subject, at)
	}
	var unknown *hub.OutcomeUnknown
	if errors.As(err, &unknown) {
		// Without an answer the call's event names no bundle but the
		// request's: the bundle is the one whose change is unknown.
		for _, e := range auditEvents(method, req, nil, subject, at) {
			e.BundleID = unknown.Bundle.ID
			e.Detail = truncate(e.Detail, max(audit.MaxDetail-len(outcomeUnknown), 0)) + outcomeUnknown
			events = append(events, e)
		}
	}
	return events
}

// unaryAuditInterceptor records what a successful unary call did, and what
// a failed call did or may have done (failedEvents). It comes after the
// authorizer, whose context names the caller and which may have filled in
// the request's recipient.
func unaryAuditInterceptor(o *options) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call, ok := auditCalls[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		defer o.auditor.Begin()()
		if call.action.Remedy() {
			// What the record is written to stays open from before the
			// remedy starts until it is recorded: a shutdown beginning
			// meanwhile would refuse the record of a remedy that took
			// effect.
			held, release, err := o.auditor.Hold(ctx)
			if err != nil {
				return nil, err
			}
			defer release()
			ctx = held
		}
		resp, err := handler(ctx, req)
		if err != nil {
			effect := "took effect"
			if _, unknown := errors.AsType[*hub.OutcomeUnknown](err); unknown {
				effect = "may have taken effect"
			}
			if rerr := o.keepAs(ctx, info.FullMethod, o.failedEvents(ctx, info.FullMethod, req, err), effect); rerr != nil {
				return nil, fmt.Errorf("%w (%s)", rerr, err.Error())
			}
			return resp, err
		}
		if err := o.record(ctx, info.FullMethod, req, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// streamAuditInterceptor records a PeekContent that sent a bundle: the
// request as read and the bundle of the first message sent. A stream that
// broke off after that message (its document's download, or the caller
// gone) is recorded too: the actor has the bundle, and can Dequeue it.
func streamAuditInterceptor(o *options) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, ok := auditCalls[info.FullMethod]; !ok {
			return handler(srv, ss)
		}
		defer o.auditor.Begin()()
		as := &auditedStream{ServerStream: ss}
		err := handler(srv, as)
		if as.bundle == nil {
			return err
		}
		// A PeekContent's event is buffered: recording it fails nothing.
		_ = o.record(ss.Context(), info.FullMethod, as.req, as.bundle)
		return err
	}
}

// auditedStream keeps a streaming call's request and the bundle it sent:
// the bundle of the first message gRPC took.
type auditedStream struct {
	grpc.ServerStream
	req    any
	bundle *messagehubv1.Bundle
}

func (s *auditedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.req == nil {
		s.req = m
	}
	return err
}

func (s *auditedStream) SendMsg(m any) error {
	sent := m
	if h, ok := m.(*heldAnswer); ok {
		// A message held for the answers' budget (answers.go): the
		// document's first message, which carries the bundle.
		sent = h.msg
	}
	err := s.ServerStream.SendMsg(m)
	if c, ok := sent.(*messagehubv1.PeekContentChunk); ok && err == nil && s.bundle == nil && c.GetBundle() != nil {
		s.bundle = c.GetBundle()
	}
	return err
}
