// Command domain-publisher is an example domain service: it tells the hub
// that data is available for market actors, with the Go client's retries.
//
//	go run ./examples/domain-publisher --hub 127.0.0.1:50051 --recipient <actor UUID> --count 1000
//
// A retry resends the same notification ids, so a save whose answer was
// lost is counted as duplicates, never stored twice. The ids come from the
// run's id (--run) and the notification's place in the run, as a real domain
// derives them from the data they announce: a run that failed is run again
// with the --run it names, saves the same ids, and what the hub already
// stored is counted as duplicates, not delivered twice. The run's id is
// printed before the first Save, so that a run killed midway is run again
// the same way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "domain-publisher:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// maxBatch is the most notifications a Save holds.
const maxBatch = 10_000

// usageError is a flag the publisher cannot run with.
type usageError struct{ error }

// run publishes as the command line args say and reports to stdout.
func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("domain-publisher", flag.ContinueOnError)
	hub := flags.String("hub", "127.0.0.1:50051", "the hub's gRPC address")
	recipient := flags.String("recipient", "", "the market actor the data is for (a UUID)")
	count := flags.Int("count", 100, "how many notifications to publish")
	batch := flags.Int("batch", 1000, "notifications per Save (1 to 10,000)")
	tokenFile := flags.String("token-file", "", "bearer token of a domain (sent over TLS; see make dev-tokens)")
	loopback := flags.Bool("token-over-loopback", false, "send the token in plaintext to a hub on loopback (development only)")
	timeout := flags.Duration("timeout", time.Minute, "how long the whole run may take")
	runID := flags.String("run", "", "the id (a UUID) of a failed run to run again with the same notification ids (empty: a new run)")
	if err := flags.Parse(args); err != nil {
		return usageError{err}
	}
	rid, err := uuid.Parse(*recipient)
	if err != nil {
		return usageError{errors.New("--recipient must be a UUID")}
	}
	// The hub takes a UUID in any case as one recipient: the ids derive
	// from its one form, so that a run again naming it otherwise saves the
	// same ids.
	*recipient = rid.String()
	if *count < 1 {
		return usageError{fmt.Errorf("--count %d: publish at least one notification", *count)}
	}
	if *batch < 1 || *batch > maxBatch {
		return usageError{fmt.Errorf("--batch %d: a Save holds 1 to %d notifications", *batch, maxBatch)}
	}
	id := uuid.New()
	if *runID != "" {
		if id, err = uuid.Parse(*runID); err != nil {
			return usageError{errors.New("--run must be a UUID")}
		}
	}
	if err := publish(stdout, *hub, *recipient, id, *count, *batch, *tokenFile, *loopback, *timeout); err != nil {
		return fmt.Errorf("%w (run again with --run %s: the same notification ids, so none is stored twice)", err, id)
	}
	return nil
}

// notificationID is the id of notification i of a run for recipient: the
// same at every run of that id, different for every other run, recipient
// and place.
func notificationID(run uuid.UUID, recipient string, i int) string {
	return uuid.NewSHA1(run, []byte(recipient+"/"+strconv.Itoa(i))).String()
}

func publish(stdout io.Writer, hub, recipient string, run uuid.UUID, count, batch int, tokenFile string, loopback bool, timeout time.Duration) error {
	opts := client.Options{Plaintext: true}
	if tokenFile != "" {
		// Read at every call, so a renewed token is used at once.
		opts.Tokens = client.TokenFile(tokenFile)
		// The client refuses this unless hub is a loopback address.
		if loopback {
			opts.TokensOverLoopback = true
		} else {
			opts = client.Options{Tokens: opts.Tokens, TLS: defaultTLS()}
		}
	}
	c, err := client.New(hub, opts)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	// Said before the first Save: a run killed with a Save in flight (a
	// deploy, the OOM killer) reports no failure of its own, and run again
	// under a new id its notifications would reach the actor twice.
	if _, err := fmt.Fprintf(stdout, "run %s (if it stops before it ends, run it again with --run %s: the same notification ids)\n", run, run); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var saved, duplicates int
	for done := 0; done < count; {
		n := min(batch, count-done)
		notes := make([]*client.Notification, n)
		for i := range notes {
			notes[i] = &client.Notification{
				Id: notificationID(run, recipient, done+i), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
				ContentType: "TimeSeries", DocumentType: "rsm-014", SupportsBundling: true, Weight: 1,
			}
		}
		res, err := c.Save(ctx, notes...) // retried inside with these same ids
		if err != nil {
			return fmt.Errorf("after %d notifications: %w", done, err)
		}
		saved, duplicates, done = saved+res.Saved, duplicates+res.Duplicates, done+n
	}
	_, _ = fmt.Fprintf(stdout, "published %d notifications for %s (%d stored, %d already there)\n", count, recipient, saved, duplicates)
	return nil
}
