package cosmos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
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
	containerBells      = "bells"      // pk = bell id: recipients of recent saves, for other instances (bells.go)
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
	{name: containerRecipients, indexed: []string{"/t/?", "/da/?"}, defaultTTL: ptr[int32](-1)},
	{name: containerDrawers, indexed: []string{"/s/?", "/e/?"}},
	{name: containerIDs, indexed: []string{"/i/*", "/s/?"}},
	{name: containerSaves, indexed: nil, defaultTTL: ptr[int32](-1)},
	{name: containerBells, indexed: nil, defaultTTL: ptr[int32](-1)},
	{name: containerAudit, indexed: []string{"/s/?", "/e/?"}, defaultTTL: ptr[int32](-1)},
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

// createDatabase creates the database --cosmos-provision found missing; a
// create that finds it taken (another instance's, meanwhile) is a success.
func createDatabase(ctx context.Context, client *azcosmos.Client, database string) error {
	_, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: database}, nil)
	if err != nil && !isStatus(err, http.StatusConflict) {
		return fmt.Errorf("create database %s: %w", database, err)
	}
	return nil
}

// checkContainers reads every container and compares it with what the
// store needs, and refuses a drift that would lose data or break queries:
// another partition key, a path the queries filter or sort on left out of
// the index, a default TTL that would expire documents the store keeps, or
// none where documents carry a ttl (Cosmos DB then ignores it, and the
// bells, audit events, aborted save records and leases of failed builds
// that only their ttl removes stay for ever). A drift that only costs (more
// paths indexed than needed) is logged as a warning.
//
// With create (--cosmos-provision), a container found missing is created
// with that throughput first, and read as the others. Only what is missing:
// an account may refuse creates through its keys
// (disableKeyBasedMetadataWriteAccess) or to the identity the store runs as,
// and a database provisioned otherwise must still open. A create that finds
// the container taken (another instance's, meanwhile) is a success.
func checkContainers(ctx context.Context, client *azcosmos.Client, database string, create *Throughput, logger *slog.Logger) error {
	var tp *azcosmos.ThroughputProperties
	if create != nil {
		var err error
		if tp, err = create.properties(); err != nil {
			return err
		}
	}
	db, err := client.NewDatabase(database)
	if err != nil {
		return err
	}
	var refused []string
	for _, c := range containers {
		cc, err := db.NewContainer(c.name)
		if err != nil {
			return err
		}
		resp, err := cc.Read(ctx, nil)
		if isStatus(err, http.StatusNotFound) && create != nil {
			_, err = db.CreateContainer(ctx, c.properties(), &azcosmos.CreateContainerOptions{ThroughputProperties: tp})
			switch {
			case err == nil || isStatus(err, http.StatusConflict):
			case tp != nil && isStatus(err, http.StatusBadRequest):
				// A serverless account refuses any throughput ("Setting
				// offer throughput or autopilot on container is not
				// supported for serverless accounts"), another account one
				// over its limit: the setting is the operator's to change.
				return fmt.Errorf("create container %s with --cosmos-throughput %s (a serverless account takes --cosmos-throughput serverless): %w",
					c.name, cmp.Or(*create, DefaultThroughput), err)
			default:
				return fmt.Errorf("create container %s: %w", c.name, err)
			}
			resp, err = cc.Read(ctx, nil)
		}
		if isStatus(err, http.StatusNotFound) {
			refused = append(refused, fmt.Sprintf("container %s does not exist (run with --cosmos-provision, or create it as docs/cosmos.md says)", c.name))
			continue
		}
		if err != nil {
			return fmt.Errorf("cosmos: read container %s: %w", c.name, err)
		}
		problems, warnings := c.drift(*resp.ContainerProperties)
		refused = append(refused, problems...)
		for _, w := range warnings {
			logger.Warn("cosmos: container differs from what the store provisions", "container", c.name, "drift", w)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("cosmos: database %s does not fit this version of MessageHub: %s", database, strings.Join(refused, "; "))
	}
	return nil
}

// drift lists how an existing container differs from c: problems that
// make the store refuse to start, and harmless differences.
func (c container) drift(p azcosmos.ContainerProperties) (problems, warnings []string) {
	if keys := p.PartitionKeyDefinition.Paths; !slices.Equal(keys, []string{"/pk"}) {
		problems = append(problems, fmt.Sprintf("container %s is partitioned by %v, the store needs /pk", c.name, keys))
	}
	policy := p.IndexingPolicy
	none := policy != nil && strings.EqualFold(string(policy.IndexingMode), string(azcosmos.IndexingModeNone))
	// Lazy indexing (an older mode azcosmos names no constant for) updates
	// the index after the write: a query may miss a document just written,
	// a recipient's entry or an id already stored.
	if policy != nil && len(c.indexed) > 0 && strings.EqualFold(string(policy.IndexingMode), "lazy") {
		problems = append(problems, fmt.Sprintf("container %s indexes lazily: its queries may miss documents just written; set its indexing mode to consistent", c.name))
	}
	for _, path := range c.indexed {
		// A path ending in /* is an array the queries look into (ids' /i:
		// ARRAY_CONTAINS over its elements): the policy must index its
		// elements, /i/[]/?, which /i/? alone does not.
		need := path
		if strings.HasSuffix(path, "/*") {
			need = strings.TrimSuffix(path, "*") + "[]/?"
		}
		if none || !policyIndexes(policy, need) {
			problems = append(problems, fmt.Sprintf("container %s does not index %s, which its queries filter or sort on", c.name, path))
		}
	}
	if !none && policyIndexes(policy, "/unused/?") {
		warnings = append(warnings, "indexes every path: each write pays for index terms no query uses (the store excludes /* and includes "+strings.Join(c.indexed, ", ")+")")
	}
	switch have := p.DefaultTimeToLive; {
	case have != nil && *have > 0 && (c.defaultTTL == nil || *c.defaultTTL < 0):
		problems = append(problems, fmt.Sprintf("container %s expires documents after %d s by default: it would lose what the store keeps", c.name, *have))
	case have == nil && c.defaultTTL != nil:
		problems = append(problems, fmt.Sprintf("container %s has no default TTL: Cosmos DB ignores the ttl its documents carry, and nothing else removes some of them; set its default TTL to -1 (on, no default)", c.name))
	case have != nil && c.defaultTTL == nil:
		warnings = append(warnings, fmt.Sprintf("has a default TTL of %d though no document of it carries a ttl", *have))
	}
	return problems, warnings
}

// policyIndexes says whether the policy indexes path (as Cosmos DB decides:
// the most specific matching included or excluded path wins, an excluded
// one on a tie). No policy is Cosmos DB's default: everything.
func policyIndexes(policy *azcosmos.IndexingPolicy, path string) bool {
	if policy == nil {
		return true
	}
	included := make([]string, 0, len(policy.IncludedPaths))
	for _, p := range policy.IncludedPaths {
		included = append(included, p.Path)
	}
	if len(included) == 0 {
		included = []string{"/*"}
	}
	best, indexed := -1, false
	for _, p := range included {
		if n := pathMatch(p, path); n > best {
			best, indexed = n, true
		}
	}
	for _, p := range policy.ExcludedPaths {
		if n := pathMatch(p.Path, path); n >= 0 && n >= best {
			best, indexed = n, false
		}
	}
	return indexed
}

// pathMatch scores how specifically policy path pattern matches path, a
// path of the form /a/b/? or /a/*: -1 when it does not match. Patterns
// end in ? (exactly that path), [] followed by ?, or * (that path and
// everything below it).
func pathMatch(pattern, path string) int {
	pat := strings.Split(strings.Trim(pattern, "/"), "/")
	segs := strings.Split(strings.Trim(path, "/"), "/")
	last := pat[len(pat)-1]
	pat = pat[:len(pat)-1]
	if segs[len(segs)-1] == "?" || segs[len(segs)-1] == "*" {
		segs = segs[:len(segs)-1]
	}
	if len(pat) > len(segs) || (last == "?" && len(pat) != len(segs)) {
		return -1
	}
	for i, p := range pat {
		if strings.Trim(p, `"`) != segs[i] {
			return -1
		}
	}
	score := 2 * len(pat)
	if last == "?" {
		score++
	}
	return score
}

// isStatus reports whether err is an HTTP answer with that status code.
func isStatus(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}
