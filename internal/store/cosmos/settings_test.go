package cosmos_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// settings is the settings document as docs/cosmos.md describes it.
type settings struct {
	ID        string `json:"id"`
	PK        string `json:"pk"`
	Version   int    `json:"version"`
	IDBuckets int    `json:"idBuckets"`
}

// readSettings reads the database's settings document on the primary (a
// transactional batch runs there), so that no replica lag hides it.
func readSettings(t *testing.T, db string) (settings, bool) {
	t.Helper()
	c := containerOf(t, db, "recipients")
	b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString("_settings"))
	b.ReadItem("settings", nil)
	resp, err := c.ExecuteTransactionalBatch(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	var s settings
	if op := resp.OperationResults[0]; op.StatusCode == http.StatusNotFound {
		return s, false
	} else if err := json.Unmarshal(op.ResourceBody, &s); err != nil {
		t.Fatal(err)
	}
	return s, true
}

// openDB opens the store on an existing database with cfg, as a second
// instance or a restart would.
func openDB(db string, cfg cosmos.Config) (*cosmos.Store, error) {
	cfg.Endpoint, cfg.Key, cfg.Provision, cfg.Database = server.Endpoint, server.Key, true, db
	if cfg.Transport == nil {
		cfg.Transport = cosmostest.NewHTTPClient()
	}
	return cosmos.Open(context.Background(), cfg)
}

// The first Open of a database writes its settings: the format version and
// the id index's bucket count.
func TestAFreshDatabaseGetsTheSettingsDocument(t *testing.T) {
	db := cosmostest.UniqueID("db")
	_ = open(t, cosmos.Config{Database: db, IDBuckets: 8})
	got, found := readSettings(t, db)
	if want := (settings{ID: "settings", PK: "_settings", Version: 2, IDBuckets: 8}); !found || got != want {
		t.Fatalf("settings %+v (found %v), want %+v", got, found, want)
	}
	s, err := openDB(db, cosmos.Config{IDBuckets: 8})
	if err != nil {
		t.Fatalf("reopening with the same settings: %v", err)
	}
	_ = s.Close()
}

// An instance configured with another bucket count than the database's id
// index would look its ids up in the wrong partitions and miss duplicates:
// Open refuses it, naming both counts, and leaves the settings as they are.
func TestOpenRefusesAnotherIDBucketCount(t *testing.T) {
	db := cosmostest.UniqueID("db")
	_ = open(t, cosmos.Config{Database: db}) // the default, 4
	_, err := openDB(db, cosmos.Config{IDBuckets: 8})
	want := "the database's id index has 4 buckets, this instance is configured with 8 (--cosmos-id-buckets)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("open with 8 buckets = %v, want a refusal saying %q", err, want)
	}
	if got, _ := readSettings(t, db); got.IDBuckets != 4 {
		t.Fatalf("a refused open changed the settings to %+v", got)
	}
}

// A database of a format version this build does not read is refused,
// naming both versions: version 1 kept every drawer of a cabinet in its
// entry.
func TestOpenRefusesAnUnknownFormatVersion(t *testing.T) {
	db := cosmostest.UniqueID("db")
	_ = open(t, cosmos.Config{Database: db})
	raw, _ := json.Marshal(settings{ID: "settings", PK: "_settings", Version: 1, IDBuckets: 4})
	c := containerOf(t, db, "recipients")
	if _, err := c.ReplaceItem(context.Background(), azcosmos.NewPartitionKeyString("_settings"), "settings", raw, nil); err != nil {
		t.Fatal(err)
	}
	_, err := openDB(db, cosmos.Config{})
	if want := "format version 1, this build reads 2"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("open = %v, want a refusal saying %q", err, want)
	}
}

// A database that holds documents but no settings was written by a build
// that kept none; nothing tells its bucket count, so it is refused, naming
// the way out.
func TestOpenRefusesADatabaseWithDataButNoSettings(t *testing.T) {
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db})
	repo := hub.New(s, hub.Options{}, nil)
	if _, err := repo.Save(context.Background(), notifications(3, uuid.NewString(), 1)); err != nil {
		t.Fatal(err)
	}
	repo.Close()
	if _, err := containerOf(t, db, "recipients").DeleteItem(context.Background(), azcosmos.NewPartitionKeyString("_settings"), "settings", nil); err != nil {
		t.Fatal(err)
	}
	// Every replica has the save and the delete: the store's look for
	// documents is a query, which a lagging replica may answer.
	if err := server.AdvanceClock(cosmostest.Default().Lag); err != nil {
		t.Fatal(err)
	}
	_, err := openDB(db, cosmos.Config{})
	if want := "holds documents but no settings document"; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--cosmos-database") {
		t.Fatalf("open = %v, want a refusal saying %q and naming --cosmos-database", err, want)
	}
	if _, found := readSettings(t, db); found {
		t.Fatal("a refused open wrote settings")
	}
}

// Instances that start at once on an empty database agree on its settings:
// the first to create them wins, and the others compare with the winner's.
// Of six instances, three configured with 4 buckets and three with 8, the
// three of the winner's count open and the other three are refused.
func TestOpensAtOnceOnAnEmptyDatabaseAgree(t *testing.T) {
	db := cosmostest.UniqueID("db")
	counts := []int{4, 8, 4, 8, 4, 8}
	errs := make([]error, len(counts))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range counts {
		wg.Go(func() {
			<-start
			s, err := openDB(db, cosmos.Config{IDBuckets: n})
			if err == nil {
				_ = s.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	got, found := readSettings(t, db)
	if !found || got.Version != 2 || (got.IDBuckets != 4 && got.IDBuckets != 8) {
		t.Fatalf("settings %+v (found %v) after six opens at once", got, found)
	}
	for i, n := range counts {
		if n == got.IDBuckets && errs[i] != nil {
			t.Fatalf("an instance of the winner's %d buckets was refused: %v", n, errs[i])
		}
		if n != got.IDBuckets && (errs[i] == nil || !strings.Contains(errs[i].Error(), "this instance is configured with")) {
			t.Fatalf("an instance of %d buckets on a database of %d: %v", n, got.IDBuckets, errs[i])
		}
	}
}

// firstOpenHook runs fn once, before the first request of a first Open that
// it is told to wait for reaches the server: the create of the settings
// document, or the look for documents across recipients' partitions.
type firstOpenHook struct {
	next policy.Transporter
	at   string // "create" or "look"
	once sync.Once
	fn   func()
}

func (h *firstOpenHook) Do(req *http.Request) (*http.Response, error) {
	pk, query := req.Header.Get("x-ms-documentdb-partitionkey"), req.Header.Get("x-ms-documentdb-query") != ""
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/colls/recipients/docs") &&
		req.Header.Get("x-ms-cosmos-is-batch-request") == "" &&
		(h.at == "create" && !query && pk == `["_settings"]` || h.at == "look" && query && pk == "") {
		h.once.Do(h.fn)
	}
	return h.next.Do(req)
}

// An instance that found no settings, while another's first Open writes
// them before its create (which then finds them taken) or before its look
// for documents (which then finds them), reads the winner's settings back
// and compares with them: the same count opens, another is refused.
func TestAnOpenThatFindsTheSettingsWrittenMeanwhileComparesWithThem(t *testing.T) {
	for _, at := range []string{"create", "look"} {
		for _, tc := range []struct {
			name          string
			loser         int
			refusedSaying string
		}{
			{"same bucket count", 4, ""},
			{"another bucket count", 8, "the database's id index has 4 buckets, this instance is configured with 8"},
		} {
			t.Run(at+", "+tc.name, func(t *testing.T) {
				db := cosmostest.UniqueID("db")
				won := false
				hook := &firstOpenHook{next: cosmostest.NewHTTPClient(), at: at, fn: func() {
					s, err := openDB(db, cosmos.Config{IDBuckets: 4})
					if err != nil {
						t.Errorf("the winner: %v", err)
						return
					}
					won = true
					_ = s.Close()
					// Every replica has the winner's settings: the look
					// for documents is a query, which a lagging replica
					// may answer.
					if err := server.AdvanceClock(cosmostest.Default().Lag); err != nil {
						t.Error(err)
					}
				}}
				s, err := openDB(db, cosmos.Config{IDBuckets: tc.loser, Transport: hook})
				if !won {
					t.Fatal("the other instance did not open first")
				}
				if tc.refusedSaying == "" {
					if err != nil {
						t.Fatalf("an instance of the same count: %v", err)
					}
					_ = s.Close()
				} else if err == nil || !strings.Contains(err.Error(), tc.refusedSaying) {
					t.Fatalf("open = %v, want a refusal saying %q", err, tc.refusedSaying)
				}
				if got, _ := readSettings(t, db); got.IDBuckets != 4 {
					t.Fatalf("settings %+v, want the winner's 4 buckets", got)
				}
			})
		}
	}
}
