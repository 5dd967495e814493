package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	hubclient "github.com/energydatahub/messagehub/client"
	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/domain"
)

const adminUsage = `usage: messagehub admin <backlog|next|trace|release|acknowledge|audit> --recipient UUID [flags]
       messagehub admin backup --to DIR [flags]
       messagehub admin recipients [--order oldest|size] [--page-size N] [--page-token T]
       messagehub admin history [--minutes N]

  backlog      the recipient's cabinets with notifications waiting, and its pending bundles
  next         what the recipient's next Peek would return, without creating it (--group)
  trace        where one notification of the recipient is (--id)
  release      give up a pending bundle the actor did not dequeue: its next Peek cuts
               afresh (--bundle, --reason)
  acknowledge  dequeue, on the actor's behalf, every notification of one cabinet up to and
               including one (--domain, --content-type, --up-to, --reason); its domain is
               told of the bundles dequeued, as for the actor's own Dequeue. The hub dequeues
               at most 100 bundles a call: the command calls again until none remain, each
               call within --timeout, and prints a line per call
  backup       a consistent copy of the embedded store, written while the hub runs into DIR
               on the hub's host (a new directory; a relative one is beside the data directory)
  recipients   the recipients with a backlog, oldest waiting notification or most waiting
               first (from the backlog figures, updated minutes apart)
  history      the backlog per domain over the last minutes (from the same figures)
  audit        the recipient's audit log, oldest first, one line per event
               (--since 2h, or --from/--to as RFC 3339 times; default: all that is kept)

backlog, next, trace, recipients, history, backup and audit change nothing an actor sees. release and
acknowledge do, at once (no confirmation): they need a reason, which the audit log records. The answer is
printed as JSON, after a line that says what was done (audit: one line per event; acknowledge: no JSON, a
line per call and one for the whole).

Exit status: 0 when done (and for --help); 2 for a mistake in the command line (an unknown call or
flag, a flag the call needs missing, a value it does not take), said once, with nothing sent to the
hub; 1 when the call failed (the hub's answer, no hub at --addr, an unreadable --token-file).
`

// adminCalls are the calls of "messagehub admin".
var adminCalls = []string{"backlog", "next", "trace", "release", "acknowledge", "backup", "recipients", "history", "audit"}

// errAdminUsage: a mistake in the command line that is said already ("messagehub
// admin" without a call or with a flag before it: the usage; a flag it does
// not know or a value that does not parse: the flag package's message).
var errAdminUsage = errors.New("usage")

// usageError is a mistake in the command line, found before any call is
// made: adminMain says it and exits 2, as the flag package's mistakes do.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// reasonMistake is the usage error of a --reason the hub would refuse
// (admin.CheckReason), said without the refusal's status.
func reasonMistake(err error) error {
	return usagef("--reason: %s", strings.TrimPrefix(err.Error(), domain.ErrInvalidArgument.Error()+": "))
}

func unknownAdminCall(call string) error {
	return usagef("unknown admin call %q: the calls are %s (messagehub admin --help says what each does)",
		call, strings.Join(adminCalls, ", "))
}

// adminMain runs "messagehub admin …" and returns its exit code.
func adminMain(ctx context.Context, args []string, out, errOut io.Writer) int {
	err := runAdmin(ctx, args, out, errOut)
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0 // asked for: the usage is the answer
	case errors.Is(err, errAdminUsage):
		return 2
	case errors.As(err, &usage):
		fmt.Fprintln(errOut, "messagehub admin:", err)
		return 2
	case err != nil:
		fmt.Fprintln(errOut, "messagehub admin:", err)
		return 1
	}
	return 0
}

// runAdmin is "messagehub admin …": it calls the Admin service of a running
// hub and prints the answer.
func runAdmin(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(errOut, adminUsage)
		if len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help"}, args[0]) {
			return flag.ErrHelp
		}
		return errAdminUsage
	}
	call, args := args[0], args[1:]
	if !slices.Contains(adminCalls, call) {
		// Said before the flags are read: they are the call's.
		return unknownAdminCall(call)
	}
	fs := flag.NewFlagSet("messagehub admin "+call, flag.ContinueOnError)
	fs.SetOutput(errOut)
	addr := fs.String("addr", "127.0.0.1:50051", "the hub's gRPC address")
	recipient := fs.String("recipient", "", "the recipient (actor) UUID")
	id := fs.String("id", "", "trace: the notification's id")
	group := fs.String("group", "PEEK_GROUP_ALL", "next: the peek group")
	bundleID := fs.String("bundle", "", "release: the pending bundle's id")
	reason := fs.String("reason", "", "release, acknowledge: why (1 to 500 characters; recorded in the audit log)")
	domainName := fs.String("domain", "", "acknowledge: the cabinet's domain (e.g. DOMAIN_TIME_SERIES or TIME_SERIES)")
	contentType := fs.String("content-type", "", "acknowledge: the cabinet's content type")
	upTo := fs.String("up-to", "", "acknowledge: the last notification id to dequeue")
	to := fs.String("to", "", "backup: the new directory to write, on the hub's host; audit: the events before this time (RFC 3339)")
	tokenFile := fs.String("token-file", "", "a file holding a bearer token with the admin role (with --auth jwt), read at every call; to a hub off loopback, with --tls only")
	useTLS := fs.Bool("tls", false, "connect with TLS (the system's roots)")
	// A full copy of a large store onto another volume takes minutes, and a
	// backup whose caller stops waiting is not kept.
	defaultTimeout := 30 * time.Second
	if call == "backup" {
		defaultTimeout = time.Hour
	}
	timeout := fs.Duration("timeout", defaultTimeout, "how long the call may take")
	order := fs.String("order", "oldest", "recipients: oldest (oldest waiting notification first) or size (most waiting first)")
	pageSize := fs.Int("page-size", 0, "recipients: at most this many (0: 100)")
	pageToken := fs.String("page-token", "", "recipients: the next_page_token of the previous page")
	minutes := fs.Int("minutes", 0, "history: the last this many minutes (0: 180)")
	since := fs.Duration("since", 0, "audit: the events of this long ago until now (e.g. 2h)")
	from := fs.String("from", "", "audit: the events at or after this time (RFC 3339)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errAdminUsage // the flag package said which flag, and listed them
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first word that is not a flag:
		// the flags after it would go unread.
		return usagef("unexpected argument %q: flags are given as --name value, and none after it was read", fs.Arg(0))
	}
	if *recipient == "" && call != "backup" && call != "recipients" && call != "history" {
		return usagef("--recipient is required")
	}
	if *timeout <= 0 {
		return usagef("--timeout %s: a call needs time (e.g. 30s; a backup of a large store, 3h)", *timeout)
	}
	if *tokenFile != "" && !*useTLS && !app.IsLoopback(*addr) {
		// Whoever answers at that address in plaintext (a listener on the
		// path, a spoofed name) would read an operator's token.
		return usagef("--token-file: a token is sent in plaintext only to a hub on this machine (a loopback address), not to %s: add --tls", *addr)
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if *tokenFile != "" {
		// Read now too, so that a missing file is said before any call.
		if _, err := tokenFileCredentials(*tokenFile).GetRequestMetadata(ctx); err != nil {
			return err
		}
		dial = append(dial, grpc.WithPerRPCCredentials(tokenFileCredentials(*tokenFile)))
	}
	conn, err := grpc.NewClient(*addr, dial...)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := adminv1.NewAdminClient(conn)
	if call == "acknowledge" {
		// Its calls are as many as the backlog needs: --timeout is each one's.
		d, ok := parseDomain(*domainName)
		if !ok || *contentType == "" || *upTo == "" || *reason == "" {
			return usagef("acknowledge needs --domain (e.g. DOMAIN_TIME_SERIES), --content-type, --up-to and --reason")
		}
		if err := admin.CheckReason(*reason); err != nil {
			return reasonMistake(err)
		}
		return acknowledge(ctx, client, &adminv1.AcknowledgeOnBehalfRequest{
			Recipient: *recipient, Domain: d, ContentType: *contentType, UpToNotificationId: *upTo, Reason: *reason,
		}, *timeout, out)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var (
		answer proto.Message
		done   string // what a remedy did, in words
	)
	switch call {
	case "backlog":
		answer, err = client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: *recipient})
	case "next":
		g, ok := messagehubv1.PeekGroup_value[*group]
		if !ok {
			return usagef("--group %q is not a peek group (e.g. PEEK_GROUP_ALL, PEEK_GROUP_TIME_SERIES)", *group)
		}
		answer, err = client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: *recipient, Group: messagehubv1.PeekGroup(g)})
	case "trace":
		if *id == "" {
			return usagef("trace needs --id")
		}
		answer, err = client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: *recipient, NotificationId: *id})
	case "recipients":
		o, ok := recipientOrders[*order]
		if !ok {
			return usagef("--order %q: oldest or size", *order)
		}
		if *pageSize < 0 || *pageSize > 1000 {
			return usagef("--page-size %d: from 1 to 1000 (0: 100)", *pageSize)
		}
		answer, err = client.ListRecipients(ctx, &adminv1.ListRecipientsRequest{Order: o, PageSize: int32(*pageSize), PageToken: *pageToken}) //nolint:gosec // bounded just now
	case "history":
		if *minutes < 0 || *minutes > 1440 {
			return usagef("--minutes %d: from 1 to 1440 (0: 180)", *minutes)
		}
		answer, err = client.GetBacklogHistory(ctx, &adminv1.GetBacklogHistoryRequest{Minutes: int32(*minutes)}) //nolint:gosec // bounded just now
	case "release":
		if *bundleID == "" || *reason == "" {
			return usagef("release needs --bundle and --reason")
		}
		if err := admin.CheckReason(*reason); err != nil {
			return reasonMistake(err)
		}
		var resp *adminv1.ReleaseBundleResponse
		resp, err = client.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{Recipient: *recipient, BundleId: *bundleID, Reason: *reason})
		if err == nil {
			r := resp.GetReleased()
			answer, done = resp, fmt.Sprintf("released bundle %s of recipient %s (%d notifications of %s/%s); its group's next Peek cuts a bundle afresh",
				r.GetBundleId(), *recipient, r.GetNotificationCount(), r.GetDomain(), r.GetContentType())
		}
	case "backup":
		if *to == "" {
			return usagef("backup needs --to DIR, a directory on the hub's host that does not exist yet")
		}
		answer, err = client.Backup(ctx, &adminv1.BackupRequest{Directory: *to})
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil {
			// The hub keeps no backup its caller stopped waiting for.
			err = fmt.Errorf("the backup did not finish within --timeout (%s) and was not kept; "+
				"a large store takes longer: run it again with a longer --timeout (e.g. 3h): %w", *timeout, err)
		}
	case "audit":
		req, err := auditRequest(*recipient, *since, *from, *to, time.Now())
		if err != nil {
			return err
		}
		return printAudit(ctx, client, req, out)
	default:
		return unknownAdminCall(call)
	}
	if err != nil {
		return err
	}
	if done != "" {
		if _, err := fmt.Fprintln(out, done); err != nil {
			return err
		}
	}
	text, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(answer)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(text))
	return err
}

// acknowledge is "messagehub admin acknowledge": it repeats the call, each
// within timeout, until the hub says no notification up to the one named
// remains (each call dequeues a bounded number of bundles, durable before
// it answers), printing a line per call and one for the whole. On a
// failure it says what was dequeued before, and that the same command goes
// on from there.
func acknowledge(ctx context.Context, client adminv1.AdminClient, req *adminv1.AcknowledgeOnBehalfRequest, timeout time.Duration, out io.Writer) error {
	var notifications, bundles int64
	for calls := 1; ; calls++ {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := client.AcknowledgeOnBehalf(callCtx, req)
		cancel()
		if err != nil {
			if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
				err = fmt.Errorf("call %d did not finish within --timeout (%s), and may have dequeued bundles of its own (the audit log names them): %w", calls, timeout, err)
			}
			return fmt.Errorf("%w; before it, %d notifications were dequeued in %d bundles (in the audit log): "+
				"the same command goes on from what is dequeued", err, notifications, bundles)
		}
		ids := resp.GetBundleIds()
		notifications += resp.GetNotifications()
		bundles += int64(len(ids))
		if len(ids) > 0 {
			if _, err := fmt.Fprintf(out, "call %d: dequeued %d notifications in %d bundles: %s\n",
				calls, resp.GetNotifications(), len(ids), strings.Join(ids, ", ")); err != nil {
				return err
			}
		}
		if !resp.GetMore() {
			break
		}
		if len(ids) == 0 {
			return fmt.Errorf("call %d dequeued nothing and says more remain; %d notifications were dequeued in %d bundles before it", calls, notifications, bundles)
		}
	}
	done := fmt.Sprintf("dequeued %d notifications of recipient %s's cabinet %s/%s up to %s, in %d bundles, on its behalf",
		notifications, req.GetRecipient(), req.GetDomain(), req.GetContentType(), req.GetUpToNotificationId(), bundles)
	if bundles == 0 {
		done = fmt.Sprintf("nothing to dequeue: notification %s of recipient %s's cabinet %s/%s is dequeued already",
			req.GetUpToNotificationId(), req.GetRecipient(), req.GetDomain(), req.GetContentType())
	}
	_, err := fmt.Fprintln(out, done)
	return err
}

// tokenFileCredentials sends the bearer token of a file, read at every
// call: acknowledge's calls may outlive a token, and one renewed in place
// (a mounted secret) is used from the next call on.
type tokenFileCredentials string

func (f tokenFileCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	// Read as the Go client reads one: a file without a token (a secret
	// not populated yet) is said to be empty, not sent as "Bearer ".
	token, err := hubclient.TokenFile(f).Token(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

// RequireTransportSecurity is false: runAdmin itself sends a token in
// plaintext only to a hub on loopback.
func (tokenFileCredentials) RequireTransportSecurity() bool { return false }

// recipientOrders are the --order values of "admin recipients".
var recipientOrders = map[string]adminv1.RecipientOrder{
	"oldest": adminv1.RecipientOrder_RECIPIENT_ORDER_OLDEST,
	"size":   adminv1.RecipientOrder_RECIPIENT_ORDER_SIZE,
}

// parseDomain reads a domain by its API name, with or without the DOMAIN_
// prefix, in any case.
func parseDomain(name string) (messagehubv1.Domain, bool) {
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "DOMAIN_") {
		name = "DOMAIN_" + name
	}
	v, ok := messagehubv1.Domain_value[name]
	return messagehubv1.Domain(v), ok && v != 0
}

// auditRequest is the first page's request of "admin audit": --since, or
// --from and --to, or everything kept. Its errors are mistakes in the
// command line.
func auditRequest(recipient string, since time.Duration, from, to string, now time.Time) (*adminv1.ListAuditEventsRequest, error) {
	req := &adminv1.ListAuditEventsRequest{Recipient: recipient, PageSize: 1000}
	if since != 0 && (from != "" || to != "") {
		return nil, usagef("audit: give --since or --from/--to, not both")
	}
	if since < 0 {
		return nil, usagef("audit: --since %s is negative", since)
	}
	if since > 0 {
		if req.FromMs = now.Add(-since).UnixMilli(); req.FromMs < 0 {
			return nil, usagef("audit: --since %s reaches before 1970, before any event", since)
		}
	}
	for _, b := range []struct {
		flag, value string
		into        *int64
	}{{"--from", from, &req.FromMs}, {"--to", to, &req.ToMs}} {
		if b.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, b.value)
		if err != nil {
			return nil, usagef("audit: %s %q is not an RFC 3339 time (e.g. 2026-11-26T10:00:00Z)", b.flag, b.value)
		}
		if *b.into = t.UnixMilli(); *b.into < 0 {
			return nil, usagef("audit: %s %q is before 1970, before any event", b.flag, b.value)
		}
		if b.flag == "--to" && *b.into == 0 { // 0 asks for no end
			return nil, usagef("audit: --to %q is not after 1970, before any event", b.value)
		}
	}
	if req.ToMs != 0 && req.ToMs < req.FromMs {
		return nil, usagef("audit: --to %s is before --from %s", to, from)
	}
	return req, nil
}

// printAudit pages through the audit log and prints one line per event:
// time (UTC), action, subject, bundle (- for none) and detail (quoted).
func printAudit(ctx context.Context, client adminv1.AdminClient, req *adminv1.ListAuditEventsRequest, out io.Writer) error {
	for {
		resp, err := client.ListAuditEvents(ctx, req)
		if err != nil {
			return err
		}
		for _, e := range resp.GetEvents() {
			if _, err := fmt.Fprintln(out, auditLine(e)); err != nil {
				return err
			}
		}
		if resp.GetNextPageToken() == "" {
			return nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func auditLine(e *adminv1.AuditEvent) string {
	bundle := cmp.Or(e.GetBundleId(), "-")
	line := fmt.Sprintf("%s  %-21s  %-36s  %-36s", time.UnixMilli(e.GetAtMs()).UTC().Format("2006-01-02T15:04:05.000Z"),
		strings.TrimPrefix(e.GetAction().String(), "AUDIT_ACTION_"), e.GetSubject(), bundle)
	if e.GetDetail() != "" {
		line += "  " + strconv.Quote(e.GetDetail())
	}
	return line
}
