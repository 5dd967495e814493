package server

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// While Cosmos DB does not serve the hub, actors and domains are told
// UNAVAILABLE and what Cosmos DB answered, but nothing of the hub's
// account: not its address, database or containers, nor Cosmos DB's own
// answer, which are the operators' to read in the log.
func TestAStoreFailureTellsTheClientNothingOfTheAccount(t *testing.T) {
	srv := cosmostest.Start(t)
	db := cosmostest.UniqueID("detail")
	st, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Database: db, Provision: true, Transport: cosmostest.NewHTTPClient(),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(st, hub.Options{}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	conn, _ := testConn(t, h)
	client := messagehubv1.NewMessageHubClient(conn)
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.Refuse503, DB: db}); err != nil {
		t.Fatal(err)
	}
	endpoint, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}

	_, peekErr := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	_, saveErr := client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: notifications(1)})
	for call, err := range map[string]error{"Peek": peekErr, "Save": saveErr} {
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "503") {
			t.Errorf("%s: %v; want UNAVAILABLE saying Cosmos DB answered 503", call, err)
		}
		for _, secret := range []string{endpoint.Host, db, "RESPONSE", "injected"} {
			if strings.Contains(st.Message(), secret) {
				t.Errorf("%s: the client is told %q: %q", call, secret, st.Message())
			}
		}
	}
}
