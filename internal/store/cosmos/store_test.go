package cosmos_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/backend"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/storetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// server is one Cosmos-protocol test server for the package; every test gets
// a database of its own on it.
var server *cosmostest.Server

func TestMain(m *testing.M) {
	srv, stop, err := cosmostest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = srv
	code := m.Run()
	stop()
	os.Exit(code)
}

// open provisions a fresh database and returns the store on it.
func open(t testing.TB, cfg cosmos.Config) *cosmos.Store {
	t.Helper()
	cfg.Endpoint, cfg.Key, cfg.Provision = server.Endpoint, server.Key, true
	if cfg.Database == "" {
		cfg.Database = cosmostest.UniqueID("db")
	}
	if cfg.Transport == nil {
		cfg.Transport = cosmostest.NewHTTPClient()
	}
	// Containers get the throughput the service provisions by default
	// (autoscale, at most 1,000 RU/s), which the test server enforces with
	// 429s: every test runs throttled as a default account would be.
	s, err := cosmos.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The suites run on the chain the binary opens (backend.Open), not on the
// bare store, so that no decorator can change what they check.
func TestContract(t *testing.T) {
	storetest.RunRepository(t, openChain)
}

// Each Store method keeps its promise, checked without the algorithm.
func TestStoreContract(t *testing.T) {
	storetest.RunStore(t, openChain)
}

// Cosmos DB is backed up by the account: Backup says it does not copy it.
func TestBackupContract(t *testing.T) {
	storetest.RunBackup(t, openChain, nil)
}

// Retention's index and the backlog figures keep their promises.
func TestFiguresContract(t *testing.T) {
	storetest.RunFigures(t, openChain)
}

// openChain provisions a fresh database, as open does, behind the chain.
func openChain(t *testing.T) store.Store {
	t.Helper()
	s, err := backend.Open(context.Background(), backend.Config{Kind: backend.Cosmos, Cosmos: cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Provision: true,
		Database: cosmostest.UniqueID("db"), Transport: cosmostest.NewHTTPClient(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
