package cosmostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// FaultKind is what the server does to a request a Fault picks.
type FaultKind string

// Every write's answer can go missing after the write applied, and a write
// can be refused before it applies; a session read can find no replica that
// has caught up. The kinds below are those outcomes, as a client sees them.
const (
	// LostTimeout applies the write, then answers 408 (Request Timeout).
	LostTimeout FaultKind = "lost-408"
	// LostUnavailable applies the write, then answers 503 (Service Unavailable).
	LostUnavailable FaultKind = "lost-503"
	// LostReset applies the write, then cuts the connection without an answer.
	LostReset FaultKind = "lost-reset"
	// LostHold applies the write and answers nothing until the client gives
	// up (its deadline passes), then cuts the connection.
	LostHold FaultKind = "lost-hold"
	// Refuse503 answers 503 without applying anything.
	Refuse503 FaultKind = "refuse-503"
	// RefuseRetryWith answers 449 (RetryWith) without applying anything.
	RefuseRetryWith FaultKind = "refuse-449"
	// ReadSessionNotAvailable answers a point read or query 404 with
	// x-ms-substatus 1002: no replica has caught up with the session token.
	ReadSessionNotAvailable FaultKind = "read-1002"
)

// Fault is one rule of the server's fault injection: the requests it picks
// (every field set must match) and what it does to them. Rules are tried in
// the order added; the first that picks a request fires.
type Fault struct {
	Kind FaultKind `json:"fault"`
	// Ops are the operations picked, as Classify names them ("create",
	// "replace", "upsert", "patch", "delete", "batch", "read", "query",
	// "readfeed"); empty picks any.
	Ops []string `json:"ops,omitempty"`
	// DB and Coll pick a database and a container by id.
	DB   string `json:"db,omitempty"`
	Coll string `json:"coll,omitempty"`
	// ID is a regular expression (JavaScript) an id the request addresses
	// must match: the document's, or any operation's of a batch.
	ID string `json:"id,omitempty"`
	// Type is a document type (the field t) a written document must have.
	Type string `json:"type,omitempty"`
	// Body is a regular expression the JSON body must match.
	Body string `json:"body,omitempty"`
	// Skip lets that many picked requests pass before the rule fires.
	Skip int `json:"skip,omitempty"`
	// Every > 1 makes the rule fire on the first picked request after
	// Skip and then on every Every-th one (the others pass), so that its
	// faults recur through a long run; 0 or 1 fires on each.
	Every int `json:"every,omitempty"`
	// Count is how many times the rule fires; 0 is for ever.
	Count int `json:"count,omitempty"`
}

// FaultState is a rule as the server holds it, with how often it picked a
// request (Seen) and fired (Fired).
type FaultState struct {
	Fault
	Seen  int `json:"seen"`
	Fired int `json:"fired"`
}

// AddFaults adds rules (control endpoint POST /_shim/faults).
func (s *Server) AddFaults(rules ...Fault) error {
	_, err := s.faults(map[string]any{"rules": rules})
	return err
}

// ClearFaults removes the rules of database db (all rules when db is "").
func (s *Server) ClearFaults(db string) error {
	_, err := s.faults(map[string]any{"clear": true, "db": db})
	return err
}

// Faults returns the rules the server holds, in order.
func (s *Server) Faults() ([]FaultState, error) {
	return s.faults(map[string]any{})
}

func (s *Server) faults(body any) ([]FaultState, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp, err := http.Post(s.Endpoint+"_shim/faults", "application/json", bytes.NewReader(b)) //nolint:gosec,noctx // our own server on 127.0.0.1
	if err != nil {
		return nil, fmt.Errorf("cosmostest: faults: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cosmostest: faults: %s: %s", resp.Status, out)
	}
	var answer struct {
		Rules []FaultState `json:"rules"`
	}
	if err := json.Unmarshal(out, &answer); err != nil {
		return nil, fmt.Errorf("cosmostest: faults: %w", err)
	}
	return answer.Rules, nil
}
