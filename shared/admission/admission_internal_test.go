package admission

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A lost compare-and-set is a conflict to retry on one server and on a replicated (R3) bucket alike.
func TestIsConflict(t *testing.T) {
	cases := []struct {
		name     string
		given    error
		expected bool
	}{
		{"single server revision mismatch", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Code: 400}, true},
		{"replicated revision mismatch", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Code: 400}, true},
		{"wrapped by the kv api", fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), true},
		{"create of an existing key", jetstream.ErrKeyExists, true},
		{"other api error", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound, Code: 404}, false},
		{"plain error", fmt.Errorf("timeout"), false},
	}
	for _, c := range cases {
		if got := isConflict(c.given); got != c.expected {
			t.Errorf("%s: isConflict = %v, expected %v", c.name, got, c.expected)
		}
	}
}
