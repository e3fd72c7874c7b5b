package builtin

import (
	"errors"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

func TestRegistry(t *testing.T) {
	r := Registry()
	if got, want := r.Names(), []string{"alfworld", "db", "kg", "os", "webshop"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	f, err := r.Get("alfworld")
	if err != nil || f.Name() != "alfworld" {
		t.Fatalf("Get(alfworld) = %v, %v", f, err)
	}
	if _, err := r.Get("chess"); !errors.Is(err, proto.ErrUnknownTask) {
		t.Fatalf("Get(chess) error %v", err)
	}
	delete(r, "alfworld")
	if _, err := Registry().Get("alfworld"); err != nil {
		t.Fatal("registries share state")
	}
}
