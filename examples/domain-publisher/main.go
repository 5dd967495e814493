// Command domain-publisher is an example domain service: it tells the hub
// that data is available for market actors, with the Go client's retries.
//
//	go run ./examples/domain-publisher --hub 127.0.0.1:50051 --recipient <actor UUID> --count 1000
//
// A retry resends the same notification ids, so a save whose answer was
// lost is counted as duplicates, never stored twice.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

func main() {
	hub := flag.String("hub", "127.0.0.1:50051", "the hub's gRPC address")
	recipient := flag.String("recipient", "", "the market actor the data is for (a UUID)")
	count := flag.Int("count", 100, "how many notifications to publish")
	batch := flag.Int("batch", 1000, "notifications per Save (at most 10,000)")
	tokenFile := flag.String("token-file", "", "bearer token of a domain (sent over TLS; see make dev-tokens)")
	loopback := flag.Bool("token-over-loopback", false, "send the token in plaintext to a hub on loopback (development only)")
	timeout := flag.Duration("timeout", time.Minute, "how long the whole run may take")
	flag.Parse()
	if _, err := uuid.Parse(*recipient); err != nil {
		fmt.Fprintln(os.Stderr, "--recipient must be a UUID")
		os.Exit(2)
	}
	if err := publish(*hub, *recipient, *count, *batch, *tokenFile, *loopback, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "domain-publisher:", err)
		os.Exit(1)
	}
}

func publish(hub, recipient string, count, batch int, tokenFile string, loopback bool, timeout time.Duration) error {
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

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var saved, duplicates int
	for done := 0; done < count; {
		n := min(batch, count-done)
		notes := make([]*client.Notification, n)
		for i := range notes {
			notes[i] = &client.Notification{
				Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
				ContentType: "TimeSeries", DocumentType: "rsm-014", SupportsBundling: true, Weight: 1,
			}
		}
		res, err := c.Save(ctx, notes...) // retried inside with these same ids
		if err != nil {
			return fmt.Errorf("after %d notifications: %w", done, err)
		}
		saved, duplicates, done = saved+res.Saved, duplicates+res.Duplicates, done+n
	}
	fmt.Printf("published %d notifications for %s (%d stored, %d already there)\n", count, recipient, saved, duplicates)
	return nil
}
