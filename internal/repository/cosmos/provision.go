package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Containers, all partitioned by /pk. See docs/cosmos.md.
const (
	containerRecipients = "recipients" // pk = recipient: head, catalog, cursors, bundles
	containerDrawers    = "drawers"    // pk = drawer id: pages of packed notifications
	containerIDs        = "ids"        // pk = id bucket: packed id index
	containerSaves      = "saves"      // pk = save id: commit records of saves in flight
)

// container describes one container and the only paths it indexes: the
// ones its queries filter or sort on. Everything else is excluded, so writes
// pay for no index they do not use.
type container struct {
	name       string
	indexed    []string
	defaultTTL *int32 // -1: items may carry their own ttl
}

func ptr[T any](v T) *T { return &v }

var containers = []container{
	{name: containerRecipients, indexed: []string{"/t/?"}, defaultTTL: ptr[int32](-1)},
	{name: containerDrawers, indexed: []string{"/s/?", "/e/?"}},
	// /i/* indexes the packed ids; /n/[]/i/? those of the layout before packing.
	{name: containerIDs, indexed: []string{"/i/*", "/n/[]/i/?", "/d/?", "/s/?"}},
	{name: containerSaves, indexed: nil, defaultTTL: ptr[int32](-1)},
}

func (c container) properties() azcosmos.ContainerProperties {
	policy := &azcosmos.IndexingPolicy{
		Automatic:     true,
		IndexingMode:  azcosmos.IndexingModeConsistent,
		ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/*"}},
	}
	for _, p := range c.indexed {
		policy.IncludedPaths = append(policy.IncludedPaths, azcosmos.IncludedPath{Path: p})
	}
	return azcosmos.ContainerProperties{
		ID:                     c.name,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}},
		IndexingPolicy:         policy,
		DefaultTimeToLive:      c.defaultTTL,
	}
}

// Throughput is how provisioning sets each container's request units:
// "autoscale=<max RU/s>" (a multiple of 1,000, at least 1,000; scales
// between a tenth of it and it), "manual=<RU/s>" (a multiple of 100, at
// least 400) or "serverless" (the account bills per request; nothing set).
type Throughput string

// DefaultThroughput is the smallest autoscale setting: 100 to 1,000 RU/s
// per container.
const DefaultThroughput Throughput = "autoscale=1000"

// properties returns what to create containers with; nil for serverless.
func (t Throughput) properties() (*azcosmos.ThroughputProperties, error) {
	if t == "" {
		t = DefaultThroughput
	}
	if t == "serverless" {
		return nil, nil
	}
	kind, value, _ := strings.Cut(string(t), "=")
	n, err := strconv.ParseInt(value, 10, 32)
	switch {
	case err != nil:
	case kind == "autoscale" && n >= 1000 && n%1000 == 0:
		p := azcosmos.NewAutoscaleThroughputProperties(int32(n))
		return &p, nil
	case kind == "manual" && n >= 400 && n%100 == 0:
		p := azcosmos.NewManualThroughputProperties(int32(n))
		return &p, nil
	}
	return nil, fmt.Errorf("cosmos throughput %q: want autoscale=<max RU/s> (a multiple of 1000, ≥ 1000), manual=<RU/s> (a multiple of 100, ≥ 400) or serverless", string(t))
}

// Validate reports whether t is a throughput setting provisioning accepts.
func (t Throughput) Validate() error {
	_, err := t.properties()
	return err
}

// provision creates the database and containers when they are missing,
// each with the throughput asked for.
func provision(ctx context.Context, client *azcosmos.Client, database string, throughput Throughput) error {
	tp, err := throughput.properties()
	if err != nil {
		return err
	}
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: database}, nil)
	if err != nil && !isStatus(err, http.StatusConflict) {
		return fmt.Errorf("create database %s: %w", database, err)
	}
	db, err := client.NewDatabase(database)
	if err != nil {
		return err
	}
	for _, c := range containers {
		_, err := db.CreateContainer(ctx, c.properties(), &azcosmos.CreateContainerOptions{ThroughputProperties: tp})
		if err != nil && !isStatus(err, http.StatusConflict) {
			return fmt.Errorf("create container %s: %w", c.name, err)
		}
	}
	return nil
}

// isStatus reports whether err is an HTTP answer with that status code.
func isStatus(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}
