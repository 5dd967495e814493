package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

const adminUsage = `usage: messagehub admin <backlog|next|trace> --recipient UUID [flags]
       messagehub admin backup --to DIR [flags]

  backlog   the recipient's cabinets with notifications waiting, and its pending bundles
  next      what the recipient's next Peek would return, without creating it (--group)
  trace     where one notification of the recipient is (--id)
  backup    a consistent copy of the embedded store, written while the hub runs into DIR
            on the hub's host (a new directory; a relative one is beside the data directory)

Nothing an actor sees changes. The answer is printed as JSON.
`

// runAdmin is "messagehub admin …": it calls the Admin service of a running
// hub and prints the answer.
func runAdmin(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(errOut, adminUsage)
		return flag.ErrHelp
	}
	call, args := args[0], args[1:]
	fs := flag.NewFlagSet("messagehub admin "+call, flag.ContinueOnError)
	fs.SetOutput(errOut)
	addr := fs.String("addr", "127.0.0.1:50051", "the hub's gRPC address")
	recipient := fs.String("recipient", "", "the recipient (actor) UUID")
	id := fs.String("id", "", "trace: the notification's id")
	group := fs.String("group", "PEEK_GROUP_ALL", "next: the peek group")
	to := fs.String("to", "", "backup: the new directory to write, on the hub's host")
	tokenFile := fs.String("token-file", "", "a file holding a bearer token with the admin role (with --auth jwt)")
	useTLS := fs.Bool("tls", false, "connect with TLS (the system's roots)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long the call may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *recipient == "" && call != "backup" {
		return errors.New("--recipient is required")
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *tokenFile != "" {
		token, err := os.ReadFile(*tokenFile) //nolint:gosec // the operator names the file
		if err != nil {
			return err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	client := adminv1.NewAdminClient(conn)
	var answer proto.Message
	switch call {
	case "backlog":
		answer, err = client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: *recipient})
	case "next":
		g, ok := messagehubv1.PeekGroup_value[*group]
		if !ok {
			return fmt.Errorf("--group %q is not a peek group (e.g. PEEK_GROUP_ALL, PEEK_GROUP_TIME_SERIES)", *group)
		}
		answer, err = client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: *recipient, Group: messagehubv1.PeekGroup(g)})
	case "trace":
		if *id == "" {
			return errors.New("trace needs --id")
		}
		answer, err = client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: *recipient, NotificationId: *id})
	case "backup":
		if *to == "" {
			return errors.New("backup needs --to DIR, a directory on the hub's host that does not exist yet")
		}
		answer, err = client.Backup(ctx, &adminv1.BackupRequest{Directory: *to})
	default:
		fmt.Fprint(errOut, adminUsage)
		return fmt.Errorf("unknown admin call %q", call)
	}
	if err != nil {
		return err
	}
	text, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(answer)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(text))
	return err
}
