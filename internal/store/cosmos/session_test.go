package cosmos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// accountAs answers the SDK's read of the account properties as an account
// whose default consistency is level.
type accountAs struct {
	next  *http.Client
	level string
}

func (a accountAs) Do(req *http.Request) (*http.Response, error) {
	resp, err := a.next.Do(req)
	if err != nil || req.Method != http.MethodGet || strings.Trim(req.URL.Path, "/") != "" {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	body = bytes.Replace(body, []byte(`"defaultConsistencyLevel":"Session"`), []byte(`"defaultConsistencyLevel":"`+a.level+`"`), 1)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

// Under Eventual or Consistent Prefix a read may miss a write that succeeded
// before it whatever token it carries: the store refuses to start, saying
// why; the levels it is correct under open.
func TestOpenChecksTheAccountConsistency(t *testing.T) {
	for _, tt := range []struct {
		level  string
		refuse bool
	}{
		{"Eventual", true}, {"ConsistentPrefix", true},
		{"Session", false}, {"BoundedStaleness", false}, {"Strong", false},
	} {
		t.Run(tt.level, func(t *testing.T) {
			cfg := cosmos.Config{
				Endpoint: server.Endpoint, Key: server.Key, Provision: true, Database: cosmostest.UniqueID("db"),
				Transport: accountAs{next: cosmostest.NewHTTPClient(), level: tt.level},
			}
			s, err := cosmos.Open(context.Background(), cfg)
			if !tt.refuse {
				if err != nil {
					t.Fatalf("Open under %s: %v", tt.level, err)
				}
				_ = s.Close()
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open under %s succeeded, want a refusal", tt.level)
			}
			if !strings.Contains(err.Error(), tt.level) || !strings.Contains(err.Error(), "Session") {
				t.Fatalf("refusal %q does not name the level found and the one needed", err)
			}
		})
	}
}

// tokenRecorder records the session tokens of writes' answers and of reads'
// requests, per container. A server that issues none (the test server
// without its lag mode) gets tokens "0:-1#<n>" stamped on writes, n counting up.
type tokenRecorder struct {
	next *http.Client
	lsn  atomic.Int64

	mu     sync.Mutex
	reads  map[string][]string // container → tokens sent on reads and queries
	writes map[string][]string // container → tokens answered to writes
}

func newTokenRecorder() *tokenRecorder {
	return &tokenRecorder{next: cosmostest.NewHTTPClient(), reads: map[string][]string{}, writes: map[string][]string{}}
}

func (s *tokenRecorder) Do(req *http.Request) (*http.Response, error) {
	op := cosmos.Classify(req)
	container := ""
	if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); len(parts) >= 4 {
		container = parts[3]
	}
	read := op == cosmos.OpRead || op == cosmos.OpQuery
	if read {
		s.mu.Lock()
		s.reads[container] = append(s.reads[container], req.Header.Get("x-ms-session-token"))
		s.mu.Unlock()
	}
	resp, err := s.next.Do(req)
	if err == nil && op != cosmos.OpMetadata && !read {
		if resp.Header.Get("x-ms-session-token") == "" {
			resp.Header.Set("x-ms-session-token", "0:-1#"+strconv.FormatInt(s.lsn.Add(1), 10))
		}
		s.mu.Lock()
		s.writes[container] = append(s.writes[container], resp.Header.Get("x-ms-session-token"))
		s.mu.Unlock()
	}
	return resp, err
}

func (s *tokenRecorder) last(m map[string][]string, container string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := m[container]
	if len(r) == 0 {
		return ""
	}
	return r[len(r)-1]
}

func tokenLSN(t *testing.T, token string) int64 {
	t.Helper()
	_, rest, _ := strings.Cut(token, ":")
	_, n, _ := strings.Cut(rest, "#")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		t.Fatalf("token %q carries no sequence number", token)
	}
	return v
}

// A Peek on another instance reads the drawer pages with the token of the
// save that wrote them (kept in the head it finalized), so a replica that
// lacks them waits instead of answering without them.
func TestReadsCarryTheTokensOfTheWritesTheyDependOn(t *testing.T) {
	db := cosmostest.UniqueID("db")
	saverTransport, readerTransport := newTokenRecorder(), newTokenRecorder()
	saver := hub.New(open(t, cosmos.Config{Database: db, Transport: saverTransport}), hub.Options{}, nil)
	t.Cleanup(saver.Close)
	reader := hub.New(open(t, cosmos.Config{Database: db, Transport: readerTransport}), hub.Options{}, nil)
	t.Cleanup(reader.Close)
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := saver.Save(ctx, notifications(10, r, 1)); err != nil {
		t.Fatal(err)
	}
	pages := saverTransport.last(saverTransport.writes, "drawers")
	if pages == "" {
		t.Fatal("the save's page batch was answered without a session token")
	}
	b, err := reader.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || len(b.NotificationIDs) != 10 {
		t.Fatalf("Peek on the other instance = %v, %v", b, err)
	}
	// The other instance's drawer query carries a token at least as recent
	// as the page batch's.
	got := readerTransport.last(readerTransport.reads, "drawers")
	if got == "" {
		t.Fatal("the drawer query of the other instance carried no session token")
	}
	if tokenLSN(t, got) < tokenLSN(t, pages) {
		t.Fatalf("drawer query token %q is older than the page batch's %q", got, pages)
	}
	// The other instance's recipient query follows a primary read whose
	// token it carries.
	if got := readerTransport.last(readerTransport.reads, "recipients"); got == "" {
		t.Fatal("the recipient query carried no session token")
	}
}

// multiWriteAccount answers the SDK's read of the account properties as an
// account that accepts writes in several regions.
type multiWriteAccount struct{ next *http.Client }

func (a multiWriteAccount) Do(req *http.Request) (*http.Response, error) {
	resp, err := a.next.Do(req)
	if err != nil || req.Method != http.MethodGet || strings.Trim(req.URL.Path, "/") != "" {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(body, []byte(`"enableMultipleWriteLocations":false`)) {
		return nil, fmt.Errorf("the account document has no enableMultipleWriteLocations: %s", body)
	}
	body = bytes.Replace(body, []byte(`"enableMultipleWriteLocations":false`), []byte(`"enableMultipleWriteLocations":true`), 1)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

// Under multi-region writes the last writer wins where one of two
// conditional writes must: the store refuses such an account, naming the
// setting.
func TestOpenRefusesAnAccountWithMultipleWriteRegions(t *testing.T) {
	cfg := cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: multiWriteAccount{next: cosmostest.NewHTTPClient()},
	}
	s, err := cosmos.Open(context.Background(), cfg)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open of a multi-region-write account succeeded, want a refusal")
	}
	if !strings.Contains(err.Error(), "enableMultipleWriteLocations") {
		t.Fatalf("refusal %q does not name the setting", err)
	}
}

// An account the store refuses is refused before provisioning creates
// anything on it: a database and six containers with throughput, billed,
// for a service that does not start.
func TestARefusedAccountGetsNoDatabase(t *testing.T) {
	ctx := context.Background()
	dbID := cosmostest.UniqueID("db")
	_, err := cosmos.Open(ctx, cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Provision: true, Database: dbID,
		Transport: accountAs{next: cosmostest.NewHTTPClient(), level: "Eventual"},
	})
	if err == nil || !strings.Contains(err.Error(), "Eventual") {
		t.Fatalf("Open under Eventual = %v, want a refusal naming it", err)
	}
	db, err := cosmostest.NewClient(t, server).NewDatabase(dbID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, nil); !absent(err) {
		t.Fatalf("the refused account's database: %v, want none", err)
	}
}

func absent(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}
