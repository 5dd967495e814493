package app_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/gateway"
)

// A request whose token's role may not make its call is refused (403)
// before its body is read, as one without a token is (401): an actor, which
// has no route with a body, cannot hold the memory of the bodies in flight
// and so refuse the domains' Saves. Each request here declares a body as
// large as the gateway takes, which alone fills --http-max-body-memory,
// and asks the server to say when it starts reading it (100 Continue); a
// domain's Save made meanwhile is served.
func TestATokenWithoutTheRoleIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	cfg, is := jwtConfig(t)
	cfg.Limits.HTTPBodyMemory = 1 // raised to the body limit: one body fills it
	r := start(t, cfg)
	token := func(role string) string { return is.RS256(t, is.Claims(uuid.NewString(), role)) }
	for _, tc := range []struct{ name, path, role string }{
		{"an actor's Save", "/v1/notifications", auth.RoleActor},
		{"an actor's backup", "/admin/v1/backup", auth.RoleActor},
		{"a domain's release", "/admin/v1/recipients/" + uuid.NewString() + "/bundles/" + uuid.NewString() + ":release", auth.RoleDomain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := sendWithoutItsBody(t, r, "POST", tc.path, token(tc.role))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 403 ") {
				t.Errorf("the first answer: %q, %v; want 403 before the body is read", line, err)
			}

			// The connection stays open: the refused request holds nothing.
			if code := saveOverHTTP(t, r, token(auth.RoleDomain)); code != http.StatusOK {
				t.Errorf("a domain's Save meanwhile: %d, want 200", code)
			}
		})
	}
}

// sendWithoutItsBody sends the headers of a request of path declaring a
// body as large as the gateway takes, which alone fills
// --http-max-body-memory, and asking the server to say when it starts
// reading it (100 Continue); nothing of the body is sent.
func sendWithoutItsBody(t *testing.T, r *running, method, path, token string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", r.app.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Only keeps a hub that waits for the body from hanging the test.
	if err := conn.SetDeadline(time.Now().Add(callTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n",
		method, path, token, gateway.DefaultMaxBodyBytes); err != nil {
		t.Fatal(err)
	}
	return conn
}

// saveOverHTTP saves a notification through the gateway with token and
// returns the answer's status.
func saveOverHTTP(t *testing.T, r *running, token string) int {
	t.Helper()
	save, err := protojson.Marshal(&messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(uuid.NewString())}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(callContext(t), http.MethodPost, "http://"+r.app.HTTPAddr()+"/v1/notifications", bytes.NewReader(save))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A route without a body (a Peek, a Dequeue) reads none, so a body its
// client sends anyway holds none of the room of the bodies in flight: an
// actor's Peek that declares a body as large as the gateway takes, and
// sends nothing of it, must not keep the domains' Saves out while it waits.
func TestARequestOfARouteWithoutABodyHoldsNoRoomForOne(t *testing.T) {
	cfg, is := jwtConfig(t)
	cfg.Limits.HTTPBodyMemory = 1 // raised to the body limit: one body fills it
	r := start(t, cfg)
	conn := sendWithoutItsBody(t, r, "GET", "/v1/peek?wait=20s", is.RS256(t, is.Claims(uuid.NewString(), auth.RoleActor)))
	// The Peek either waits (its body left alone) or has its body read
	// (the server says 100 Continue), holding the room of one.
	firstLine := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			line += "(" + err.Error() + ")"
		}
		firstLine <- line
	}()
	read := ""
	for read == "" && app.Waiting(r.app) == 0 {
		select {
		case read = <-firstLine:
		case <-time.After(time.Millisecond):
		}
	}

	if code := saveOverHTTP(t, r, is.RS256(t, is.Claims(uuid.NewString(), auth.RoleDomain))); code != http.StatusOK {
		t.Errorf("a domain's Save while an actor's peek with a body waits: %d, want 200", code)
	}
	if read != "" {
		t.Errorf("the peek's first answer: %q; want it waiting, its body not read", read)
	}
}
