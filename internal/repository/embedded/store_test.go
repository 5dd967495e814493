package embedded_test

import (
	"testing"

	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/embedded"
)

func TestContract(t *testing.T) {
	repository.RunContractSuite(t, func(t *testing.T) repository.Store {
		s, err := embedded.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
