package cosmos_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// At start-up the store compares the containers it finds with what it
// needs: a drift that would lose data or break queries is refused with a
// message naming it; one that only costs is a warning.
func TestOpenRefusesContainersThatDriftedAndWarnsOfHarmlessDrift(t *testing.T) {
	only := func(paths ...string) *azcosmos.IndexingPolicy {
		p := &azcosmos.IndexingPolicy{Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent, ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/*"}}}
		for _, path := range paths {
			p.IncludedPaths = append(p.IncludedPaths, azcosmos.IncludedPath{Path: path})
		}
		return p
	}
	everything := &azcosmos.IndexingPolicy{Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent, IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}}}
	for _, tc := range []struct {
		name    string
		props   azcosmos.ContainerProperties
		refused string // "" : opens, with warning
		warning string
	}{
		{name: "another partition key", refused: "container drawers is partitioned by [/id], the store needs /pk",
			props: azcosmos.ContainerProperties{ID: "drawers", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/id"}}, IndexingPolicy: only("/s/?", "/e/?")}},
		{name: "a queried path not indexed", refused: "container ids does not index /i/*",
			props: azcosmos.ContainerProperties{ID: "ids", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/s/?")}},
		{name: "the id array indexed but not its elements", refused: "container ids does not index /i/*",
			props: azcosmos.ContainerProperties{ID: "ids", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/i/?", "/s/?")}},
		{name: "lazy indexing", refused: "container recipients indexes lazily",
			props: azcosmos.ContainerProperties{ID: "recipients", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: lazy(only("/t/?", "/da/?")), DefaultTimeToLive: ttlOf(-1)}},
		{name: "a default TTL that expires heads", refused: "container recipients expires documents after 3600 s",
			props: azcosmos.ContainerProperties{ID: "recipients", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/t/?"), DefaultTimeToLive: ttlOf(3600)}},
		{name: "every path indexed", warning: "indexes every path",
			props: azcosmos.ContainerProperties{ID: "drawers", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: everything}},
		{name: "no default TTL where documents carry one", refused: "container recipients has no default TTL",
			props: azcosmos.ContainerProperties{ID: "recipients", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/t/?", "/da/?")}},
		{name: "no default TTL for audit events, which only their ttl removes", refused: "container audit has no default TTL",
			props: azcosmos.ContainerProperties{ID: "audit", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/s/?", "/e/?")}},
		{name: "no index of the dequeue times retention queries", refused: "container recipients does not index /da/?",
			props: azcosmos.ContainerProperties{ID: "recipients", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: only("/t/?"), DefaultTimeToLive: ttlOf(-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dbID := cosmostest.UniqueID("db")
			client := cosmostest.NewClient(t, server)
			if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
				t.Fatal(err)
			}
			db, _ := client.NewDatabase(dbID)
			if _, err := db.CreateContainer(ctx, tc.props, nil); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			s, err := cosmos.Open(ctx, cosmos.Config{
				Endpoint: server.Endpoint, Key: server.Key, Provision: true, Database: dbID, Throughput: "serverless",
				Transport: cosmostest.NewHTTPClient(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("open = %v, want a refusal naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			if !strings.Contains(logs.String(), tc.warning) || !strings.Contains(logs.String(), "level=WARN") {
				t.Fatalf("no warning %q in %s", tc.warning, logs.String())
			}
		})
	}
}

// A database the store provisioned opens without a warning.
func TestOpenOfAProvisionedDatabaseWarnsOfNothing(t *testing.T) {
	dbID := cosmostest.UniqueID("db")
	_ = open(t, cosmos.Config{Database: dbID})
	var logs bytes.Buffer
	s := open(t, cosmos.Config{Database: dbID, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_ = s.Close()
	if strings.Contains(logs.String(), "differs") {
		t.Fatalf("warnings: %s", logs.String())
	}
}

func ttlOf(s int32) *int32 { return &s }

func lazy(p *azcosmos.IndexingPolicy) *azcosmos.IndexingPolicy {
	p.IndexingMode = azcosmos.IndexingMode("lazy") // Cosmos DB's older mode; azcosmos names no constant for it
	return p
}

// The id lookup reads the elements of the array c.i (ARRAY_CONTAINS): an
// ids container that indexes exactly those (/i/[]/?) serves it as well as
// the /i/* the store provisions, and opens.
func TestOpenAcceptsAnIDIndexOfTheArraysElements(t *testing.T) {
	ctx := context.Background()
	dbID := cosmostest.UniqueID("db")
	client := cosmostest.NewClient(t, server)
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := client.NewDatabase(dbID)
	policy := &azcosmos.IndexingPolicy{Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent,
		IncludedPaths: []azcosmos.IncludedPath{{Path: "/i/[]/?"}, {Path: "/s/?"}}, ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/*"}}}
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "ids",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: policy}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := cosmos.Open(ctx, cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Provision: true, Database: dbID, Throughput: "serverless",
		Transport: cosmostest.NewHTTPClient(),
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// Without provisioning, a container that is missing is named at start-up.
func TestOpenWithoutProvisioningNamesAMissingContainer(t *testing.T) {
	ctx := context.Background()
	dbID := cosmostest.UniqueID("db")
	client := cosmostest.NewClient(t, server)
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: dbID}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := cosmos.Open(ctx, cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Database: dbID, Transport: cosmostest.NewHTTPClient(),
	})
	if err == nil || !strings.Contains(err.Error(), "container recipients does not exist (run with --cosmos-provision") {
		t.Fatalf("open = %v, want the missing containers named", err)
	}
}

// Without provisioning, a database that is missing is named at start-up,
// with what to do, as a missing container is.
func TestOpenWithoutProvisioningNamesAMissingDatabase(t *testing.T) {
	dbID := cosmostest.UniqueID("db")
	_, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: server.Endpoint, Key: server.Key, Database: dbID, Transport: cosmostest.NewHTTPClient(),
	})
	if err == nil || !strings.Contains(err.Error(), "database "+dbID+" does not exist (run with --cosmos-provision") {
		t.Fatalf("open = %v, want the missing database named", err)
	}
}

// An account that refuses the instance's key (rotated, or wrong) answers
// 401 to the account read every request starts with. With provisioning on
// (the default) the start-up error must say so, as it does without: the
// 401 is what the operator has to fix, not the consistency level the
// unread account properties left unknown.
func TestOpenWithProvisioningNamesARefusedKey(t *testing.T) {
	for _, provision := range []bool{true, false} {
		t.Run(fmt.Sprintf("provision=%v", provision), func(t *testing.T) {
			ct := cosmostest.NewCountingTransport(nil)
			ct.Fault = func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusUnauthorized, Status: "401 Unauthorized", Request: req,
					Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(`{"code":"Unauthorized","message":"The input authorization token can't serve the request. ` +
						`The wrong key is being used or the expected payload is not built as per the protocol."}`))}, nil
			}
			_, err := cosmos.Open(context.Background(), cosmos.Config{
				Endpoint: server.Endpoint, Key: server.Key, Provision: provision, Database: cosmostest.UniqueID("db"), Transport: ct,
			})
			if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "wrong key") {
				t.Fatalf("open = %v, want the account's 401 and its message", err)
			}
		})
	}
}

// Provisioning creates the database and containers that are missing, and
// only those: an account that refuses creates through its keys
// (disableKeyBasedMetadataWriteAccess, the hardening that leaves them to
// Azure Resource Manager) answers 403 to every create of a database or
// container, and a database already provisioned there opens with
// --cosmos-provision on, its default.
func TestOpenWithProvisioningCreatesNothingThatExists(t *testing.T) {
	dbID := cosmostest.UniqueID("db")
	_ = open(t, cosmos.Config{Database: dbID}).Close()
	ct := cosmostest.NewCountingTransport(nil)
	ct.Fault = func(req *http.Request) (*http.Response, error) {
		if op := cosmostest.Classify(req); op != "CreateDatabase" && op != "CreateContainer" {
			return nil, nil
		}
		return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Request: req,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"code":"Forbidden","message":"Operation 'POST' on resource 'colls' is not allowed through ` +
				`Azure Cosmos DB endpoint. Please switch on such operations for your account, or perform this operation through Azure Resource Manager."}`))}, nil
	}
	s := open(t, cosmos.Config{Database: dbID, Transport: ct})
	_ = s.Close()
	if n := ct.ByOp()["CreateDatabase"] + ct.ByOp()["CreateContainer"]; n != 0 {
		t.Fatalf("%d creates of what exists (%s)", n, ct.OpCounts())
	}
}

// A serverless account refuses a container created with throughput (400,
// "Setting offer throughput or autopilot on container is not supported for
// serverless accounts."): the refusal names the setting to change, and the
// store opens with it changed.
func TestProvisioningOnAServerlessAccountNamesTheThroughputSetting(t *testing.T) {
	opts := cosmostest.Default()
	opts.Serverless = true
	serverless := cosmostest.StartWith(t, opts)
	ctx := context.Background()
	dbID := cosmostest.UniqueID("db")
	cfg := cosmos.Config{
		Endpoint: serverless.Endpoint, Key: serverless.Key, Provision: true, Database: dbID,
		Transport: cosmostest.NewHTTPClient(),
	}
	for _, tp := range []cosmos.Throughput{"", "manual=400"} {
		cfg.Throughput = tp
		_, err := cosmos.Open(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "--cosmos-throughput serverless") {
			t.Fatalf("open with throughput %q = %v, want a refusal naming --cosmos-throughput serverless", tp, err)
		}
	}
	cfg.Throughput = "serverless"
	s, err := cosmos.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}
