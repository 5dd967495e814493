package cosmos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Reads in Cosmos DB are served by any replica of a partition. Under the
// Session consistency level a replica answers a read only once it has
// caught up with the session token the read carries; without one (azcosmos
// v1.5.0 never adds one by itself) a read may lag behind writes that
// already succeeded. So the store carries tokens itself:
//
//   - every write's token is merged into the token of its container, so this
//     process reads its own writes;
//   - tokens other instances need travel inside the records that point at
//     what was written: the drawers token of a save's page batches in the
//     head it finalizes, the commit record's token in the reservation and in
//     the id documents;
//   - a recipient's state is read after a primary read of its head (a
//     transactional batch always runs on the primary), with that read's
//     token, so it sees every write that succeeded before it began.

// sessionTokens keeps one merged session token per container: for each
// partition key range the token with the highest logical sequence number.
type sessionTokens struct {
	mu     sync.Mutex
	ranges map[string]map[string]string // container → range id → token segment
}

func newSessionTokens() *sessionTokens {
	return &sessionTokens{ranges: make(map[string]map[string]string)}
}

// note merges a token returned for the container.
func (t *sessionTokens) note(container, token string) {
	if token == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.ranges[container]
	if m == nil {
		m = make(map[string]string)
		t.ranges[container] = m
	}
	mergeInto(m, token)
}

// get returns the container's merged token, nil when there is none.
func (t *sessionTokens) get(container string) *string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ranges[container]) == 0 {
		return nil
	}
	s := joinTokens(t.ranges[container])
	return &s
}

// mergeTokens merges session tokens into one.
func mergeTokens(tokens ...string) string {
	m := make(map[string]string)
	for _, tok := range tokens {
		mergeInto(m, tok)
	}
	return joinTokens(m)
}

// mergeInto adds a token's segments ("<range>:<lsn>" or
// "<range>:<version>#<global lsn>#…", comma-separated) to m, keeping per range
// the segment with the higher logical sequence number.
func mergeInto(m map[string]string, token string) {
	for seg := range strings.SplitSeq(token, ",") {
		seg = strings.TrimSpace(seg)
		rng, _, ok := strings.Cut(seg, ":")
		if !ok || seg == "" {
			continue
		}
		if old, ok := m[rng]; !ok || lsn(seg) >= lsn(old) {
			m[rng] = seg
		}
	}
}

// lsn reads the global logical sequence number of a token segment; -1 when
// it cannot (such a segment is replaced by any newer one).
func lsn(seg string) int64 {
	_, rest, _ := strings.Cut(seg, ":")
	parts := strings.Split(rest, "#")
	field := parts[0]
	if len(parts) >= 2 {
		field = parts[1]
	}
	n, err := strconv.ParseInt(field, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func joinTokens(m map[string]string) string {
	segs := make([]string, 0, len(m))
	for _, s := range m {
		segs = append(segs, s)
	}
	// Any order is valid; a stable one keeps documents from changing needlessly.
	slices.Sort(segs)
	return strings.Join(segs, ",")
}

// accountReader remembers the account properties the SDK reads (GET on the
// account endpoint), to learn the default consistency level without a
// request of its own.
type accountReader struct {
	next policy.Transporter

	mu         sync.Mutex
	level      string
	multiWrite bool
}

func (a *accountReader) Do(req *http.Request) (*http.Response, error) {
	resp, err := a.next.Do(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Path != "/" && req.URL.Path != "" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, err
	}
	var props struct {
		Policy struct {
			Level string `json:"defaultConsistencyLevel"`
		} `json:"userConsistencyPolicy"`
		MultiWrite bool `json:"enableMultipleWriteLocations"`
	}
	if json.Unmarshal(body, &props) == nil && props.Policy.Level != "" {
		a.mu.Lock()
		a.level = props.Policy.Level
		a.multiWrite = props.MultiWrite
		a.mu.Unlock()
	}
	return resp, err
}

func (a *accountReader) consistency() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.level
}

// checkWriteRegions refuses an account that accepts writes in several
// regions: there, two conflicting writes to one item both succeed in their
// regions and the last writer wins when they replicate
// (https://learn.microsoft.com/en-us/azure/cosmos-db/conflict-resolution-policies),
// while every rule of this store that "of two conditional writes one
// wins" (etags, creates) needs one region to decide.
func (a *accountReader) checkWriteRegions() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.multiWrite {
		return fmt.Errorf("cosmos: the account accepts writes in multiple regions (enableMultipleWriteLocations: true); " +
			"MessageHub needs a single write region (its conditional writes decide saves, peeks and dequeues): " +
			"turn off multi-region writes on the account, or give MessageHub an account with one write region")
	}
	return nil
}

// checkConsistency refuses the levels under which a read may miss a write
// that succeeded before it even with a session token.
func checkConsistency(level string) error {
	switch strings.ToLower(level) {
	case "session", "boundedstaleness", "strong":
		return nil
	case "eventual", "consistentprefix":
		return fmt.Errorf("cosmos: the account's default consistency is %s; MessageHub needs Session, Bounded Staleness or Strong "+
			"(reads must see the writes they depend on): change the account's default consistency level", level)
	case "":
		return fmt.Errorf("cosmos: the account's default consistency level could not be read")
	default:
		return fmt.Errorf("cosmos: unknown account consistency level %q", level)
	}
}
