package pebble_test

import (
	"testing"

	"github.com/energydatahub/messagehub/internal/store/storetest"
)

// The audit log's part of the contract, on the chain the binary opens.
func TestAuditContract(t *testing.T) {
	storetest.RunAudit(t, openChain)
}
