package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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
	{name: containerIDs, indexed: []string{"/n/[]/i/?", "/d/?", "/s/?"}},
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

// provision creates the database and containers when they are missing.
func provision(ctx context.Context, client *azcosmos.Client, database string) error {
	_, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: database}, nil)
	if err != nil && !isStatus(err, http.StatusConflict) {
		return fmt.Errorf("create database %s: %w", database, err)
	}
	db, err := client.NewDatabase(database)
	if err != nil {
		return err
	}
	for _, c := range containers {
		_, err := db.CreateContainer(ctx, c.properties(), nil)
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
