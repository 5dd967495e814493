package adversary

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// nothingPending fails the test when recipient has anything to peek.
func nothingPending(t *testing.T, h *hub, recipient string) {
	t.Helper()
	resp, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	if b := resp.GetBundle(); b != nil {
		t.Errorf("a refused request stored %d notifications for %s", len(b.GetNotificationIds()), recipient)
	}
}

// An HTTP Save body is exactly one JSON document: a second document or
// garbage after the first is 400 and nothing of the first is saved, however
// large it is.
func httpSaveBodyOfMoreThanOneDocument(t *testing.T) {
	h := startHub(t)
	recipient := uuid.NewString()
	doc := func(n int) string {
		req := &messagehubv1.SaveRequest{}
		for range n {
			req.Notifications = append(req.Notifications, notification(recipient))
		}
		b, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	one, full := doc(1), doc(maxSave)
	bodies := []struct{ name, body string }{
		{"two documents", one + one},
		{"two documents on two lines", one + "\n" + one},
		{"a document and garbage", one + "garbage"},
		{"a document and a brace", one + "}"},
		{"a document, white space and a nul", one + " \t\r\n\x00"},
		{"the largest Save and a second document", full + full},
	}
	measure(t, h, budget, func() {
		for _, b := range bodies {
			code, msg := postJSON(t, h, "/v1/notifications", b.body)
			if code != http.StatusBadRequest || !strings.Contains(msg, "after the JSON document") {
				t.Errorf("%s: %d %q; want 400 saying what follows the document", b.name, code, msg)
			}
		}
	})
	nothingPending(t, h, recipient)
}

// postJSON posts body to path and returns the status and the error body's
// message.
func postJSON(t *testing.T, h *hub, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+h.httpAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, e.Message
}

// invokeRaw calls method over conn with body as its request's bytes.
func invokeRaw(ctx context.Context, conn *grpc.ClientConn, method string, body []byte) error {
	var reply rawBytes
	return conn.Invoke(ctx, method, rawBytes(body), &reply, grpc.ForceCodecV2(rawCodec{}))
}

// Bytes that are not a SaveRequest are the client's error, INVALID_ARGUMENT,
// not INTERNAL, and nothing of them is stored.
func malformedGRPCSave(t *testing.T) {
	h := startHub(t)
	recipient := uuid.NewString()
	valid, err := proto.Marshal(&messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
		notification(recipient), notification(recipient),
	}})
	if err != nil {
		t.Fatal(err)
	}
	bodies := []struct {
		name string
		body []byte
	}{
		{"truncated", valid[:len(valid)-7]},
		{"garbage", bytes.Repeat([]byte{0xff}, 11)},
		{"a varint where a message belongs", []byte{0x08, 0x01}},
		{"a length past the end", []byte{0x0a, 0xff, 0xff, 0x03}},
		{"an end of group", []byte{0x0c}},
		{"a valid notification and garbage", append(append([]byte{}, valid...), 0xff, 0xff)},
	}
	measure(t, h, budget, func() {
		for _, b := range bodies {
			err := invokeRaw(ctxT(t), h.conn, messagehubv1.MessageHub_Save_FullMethodName, b.body)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "SaveRequest") {
				t.Errorf("%s: %v; want INVALID_ARGUMENT naming the message", b.name, err)
			}
		}
	})
	nothingPending(t, h, recipient)
}

// A Save of millions of empty notifications is a few MiB on the wire but
// would decode to gigabytes (an empty notification is 2 bytes on the wire,
// over 100 in memory). With --auth jwt its token and role are checked
// before it is read, and a domain's Save is counted on the wire before it
// is decoded: none of them grows the hub by much more than its bytes.
func manyEmptyNotificationsWithJWT(t *testing.T) {
	const issuer, audience = "https://issuer.adversary.test/", "messagehub"
	is := authtest.NewIssuer(t, issuer, audience)
	h := startHub(t, "--auth", "jwt", "--jwks-file", is.WriteJWKS(t), "--jwt-issuer", issuer, "--jwt-audience", audience)
	// 4 Mi empty notifications (field 1, length 0): 8 MiB on the wire,
	// over 400 MiB decoded; four at once.
	const count, calls = 4 << 20, 4
	body := bytes.Repeat([]byte{0x0a, 0x00}, count)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+token)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"without a token", ctxT(t), codes.Unauthenticated},
		{"with a token of another issuer", as(authtest.NewIssuer(t, issuer, audience).ES256(t, is.Claims(uuid.NewString(), "domain"))), codes.Unauthenticated},
		{"with an actor's token", as(is.ES256(t, is.Claims(uuid.NewString(), "actor"))), codes.PermissionDenied},
		{"with a domain's token", as(is.ES256(t, is.Claims(uuid.NewString(), "domain"))), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, calls)
			measure(t, h, budget, func() {
				var wg sync.WaitGroup
				for i := range calls {
					wg.Go(func() { errs[i] = invokeRaw(tc.ctx, h.conn, messagehubv1.MessageHub_Save_FullMethodName, body) })
				}
				wg.Wait()
			})
			for _, err := range errs {
				if status.Code(err) != tc.want {
					t.Errorf("%v; want %v", err, tc.want)
				}
			}
			t.Logf("%d Saves of %d Mi empty notifications (%d MiB each): %v", calls, count>>20, len(body)>>20, status.Code(errs[0]))
		})
	}
	// Over HTTP an empty notification is 3 bytes of JSON ({},): 12 MiB.
	json := `{"notifications":[{}` + strings.Repeat(`,{}`, count-1) + `]}`
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"over HTTP without a token", "", http.StatusUnauthorized},
		{"over HTTP with a domain's token", is.ES256(t, is.Claims(uuid.NewString(), "domain")), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codes := make([]int, calls)
			measure(t, h, budget, func() {
				var wg sync.WaitGroup
				for i := range calls {
					wg.Go(func() { codes[i] = post(t, h, "/v1/notifications", tc.token, json) })
				}
				wg.Wait()
			})
			for _, code := range codes {
				if code != tc.want {
					t.Errorf("%d; want %d", code, tc.want)
				}
			}
			t.Logf("%d Saves of %d Mi empty notifications (%d MiB of JSON each): %d", calls, count>>20, len(json)>>20, codes[0])
		})
	}
}

// post posts a JSON body to path with a bearer token, unless it is empty,
// and returns the status. It calls no method of t but Logf, so that
// goroutines may use it; a failed request is status 0.
func post(t *testing.T, h *hub, path, token, body string) int {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+h.httpAddr+path, strings.NewReader(body))
	if err != nil {
		t.Logf("%v", err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: callTimeout}).Do(req)
	if err != nil {
		t.Logf("POST %s: %v", path, err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
