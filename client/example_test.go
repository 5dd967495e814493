package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A domain service saves notifications; a retry inside Save resends the
// same ids, so keep them with the data they announce.
func ExampleClient_Save() {
	c, err := client.New("hub.example.org:443", client.Options{
		TLS:    &tls.Config{MinVersion: tls.VersionTLS12},
		Tokens: client.StaticToken(os.Getenv("MESSAGEHUB_TOKEN")),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The id is derived from the data the notification announces (here a
	// metering point's time series of one day), never made anew at send
	// time: saving it again after a failure, or after a restart, sends the
	// same id, and what the hub already stored counts as a duplicate.
	id := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://domain.example.org/time-series/571313180000000005/2026-11-27"))
	res, err := c.Save(ctx, &client.Notification{
		Id: id.String(), Recipient: "0d9f3c2a-1111-4c39-9f0a-3f5c5f8f0a01",
		Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES, ContentType: "TimeSeries", SupportsBundling: true, Weight: 1,
	})
	if err != nil {
		log.Fatal(err) // after the retries: keep the notifications and save them later, same ids
	}
	log.Printf("%d stored, %d already there", res.Saved, res.Duplicates)
}

// A market actor peeks, stores what the bundle announces, then dequeues.
// It runs for longer than a token lives, so it reads its token from the
// file where it is renewed in place (a StaticToken would be sent after it
// expired).
func ExampleClient_Peek() {
	c, err := client.New("hub.example.org:443", client.Options{
		TLS:    &tls.Config{MinVersion: tls.VersionTLS12},
		Tokens: client.TokenFile(os.Getenv("MESSAGEHUB_TOKEN_FILE")),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// With a token the recipient may be left empty: the actor peeks as itself.
		b, err := c.Peek(ctx, "", messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
		if err != nil || b == nil {
			cancel()
			return // nothing now (nil): peek again later, backing off
		}
		// ... fetch and store the data of b.GetNotificationIds() durably ...
		err = c.Dequeue(ctx, "", b.GetId())
		cancel()
		switch {
		case errors.Is(err, client.ErrNotFound): // not pending: another poller of this actor dequeued it
			log.Printf("bundle %s was not pending", b.GetId())
		case err != nil:
			log.Fatal(err)
		}
	}
}
